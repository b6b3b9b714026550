package ipfix

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/netsampler/goflow2/v2/decoders/netflow"

	"github.com/flowlens/flowlens/internal/agent/ipfixsize"
	"github.com/flowlens/flowlens/pkg/flow"
)

// records returns a batch mixing IPv4 TCP, IPv6 UDP, ICMP and ICMPv6 flows,
// n of them, every field distinct from one record to the next.
func records(n int) []flow.Record {
	start := time.UnixMilli(1_700_000_000_123)
	out := make([]flow.Record, n)
	for i := range out {
		r := &out[i]
		r.StartTime = start.Add(time.Duration(i) * time.Millisecond)
		r.EndTime = r.StartTime.Add(4*time.Second + 567*time.Millisecond)
		r.Packets = uint64(10 + i)
		r.Bytes = r.Packets*100 + uint64(i)
		r.SrcMAC = [6]byte{0x02, 0, 0, 0, byte(i >> 8), byte(i)}
		r.DstMAC = [6]byte{0xde, 0xad, 0xbe, 0xef, byte(i >> 8), byte(i)}
		r.DSCP = uint8(i % 64)
		dir := flow.DirIngress
		if i%2 == 1 {
			dir = flow.DirEgress
		}
		r.Interfaces = []flow.Interface{{Name: "eth0", Ifindex: 2, Direction: dir}}
		switch i % 4 {
		case 0: // IPv4 TCP
			r.SrcAddr = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
			r.DstAddr = netip.MustParseAddr("192.168.1.1")
			r.SrcPort, r.DstPort, r.Proto = uint16(40000+i), 443, 6
			r.TCPFlags = 0x12 | flow.TCPFlagSynAck
			r.EthType = 0x0800
		case 1: // IPv6 UDP
			r.SrcAddr = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)})
			r.DstAddr = netip.MustParseAddr("fd00::53")
			r.SrcPort, r.DstPort, r.Proto = uint16(50000+i), 53, 17
			r.EthType = 0x86dd
		case 2: // ICMP echo request
			r.SrcAddr = netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)})
			r.DstAddr = netip.MustParseAddr("8.8.8.8")
			r.Proto, r.IcmpType, r.IcmpCode = 1, 8, 0
			r.EthType = 0x0800
		case 3: // ICMPv6 destination unreachable, port
			r.SrcAddr = netip.MustParseAddr("fe80::1")
			r.DstAddr = netip.AddrFrom16([16]byte{0xfe, 0x80, 14: byte(i >> 8), 15: byte(i)})
			r.Proto, r.IcmpType, r.IcmpCode = 58, 1, 4
			r.EthType = 0x86dd
		}
	}
	return out
}

// want returns the value goflow2 must decode for each standard IE of r.
func want(r *flow.Record) map[uint16]uint64 {
	u := func(b []byte) uint64 {
		var v uint64
		for _, x := range b {
			v = v<<8 | uint64(x)
		}
		return v
	}
	dir := uint64(0)
	if r.Interfaces[0].Direction == flow.DirEgress {
		dir = 1
	}
	m := map[uint16]uint64{
		7: uint64(r.SrcPort), 11: uint64(r.DstPort), 4: uint64(r.Proto),
		1: r.Bytes - 14*r.Packets, 2: r.Packets, 352: r.Bytes,
		6:   uint64(r.TCPFlags & 0xff),
		152: uint64(r.StartTime.UnixMilli()), 153: uint64(r.EndTime.UnixMilli()),
		5: uint64(r.DSCP) << 2, 56: u(r.SrcMAC[:]), 80: u(r.DstMAC[:]), 256: uint64(r.EthType), 61: dir,
	}
	icmp := uint64(0)
	if r.Proto == 1 || r.Proto == 58 {
		icmp = uint64(r.IcmpType)<<8 | uint64(r.IcmpCode)
	}
	if r.SrcAddr.Is4() {
		m[32] = icmp
	} else {
		m[139] = icmp
	}
	return m
}

// decoded is one data record as goflow2 decoded it.
type decoded struct {
	template uint16
	domain   uint32
	values   map[uint16][]byte // IANA elements
	pen      map[uint16][]byte // elements under EnterpriseNumber
	otherPEN int               // elements under any other enterprise number
	pens     map[uint32]int    // elements per enterprise number
}

// dataRecords returns the data records of a message goflow2 decoded.
func dataRecords(p netflow.IPFIXPacket) (out []decoded) {
	for _, fs := range p.FlowSets {
		ds, ok := fs.(netflow.DataFlowSet)
		if !ok {
			continue
		}
		for _, rec := range ds.Records {
			d := decoded{template: ds.Id, domain: p.ObservationDomainId, values: map[uint16][]byte{}, pen: map[uint16][]byte{},
				pens: map[uint32]int{}}
			for _, f := range rec.Values {
				if f.PenProvided {
					d.pens[f.Pen]++
				}
				switch {
				case !f.PenProvided:
					d.values[f.Type] = f.Value.([]byte)
				case f.Pen == EnterpriseNumber:
					d.pen[f.Type] = f.Value.([]byte)
				default:
					d.otherPEN++
				}
			}
			out = append(out, d)
		}
	}
	return out
}

// decode runs goflow2's decoder on one message.
func decode(t *testing.T, ts netflow.NetFlowTemplateSystem, msg []byte) (netflow.IPFIXPacket, []decoded, error) {
	t.Helper()
	var p netflow.IPFIXPacket
	var v9 netflow.NFv9Packet
	if err := netflow.DecodeMessageVersion(bytes.NewBuffer(msg), ts, &v9, &p); err != nil {
		return p, nil, err
	}
	return p, dataRecords(p), nil
}

func check(t *testing.T, got decoded, r *flow.Record, domain uint32) {
	t.Helper()
	tmpl, src, dst := TemplateIPv4, uint16(8), uint16(12)
	natSrc, natDst := uint16(225), uint16(226)
	if !r.SrcAddr.Is4() {
		tmpl, src, dst = TemplateIPv6, 27, 28
		natSrc, natDst = 281, 282
	}
	fields := 18
	if r.Translated() {
		tmpl += variantNAT // TemplateIPv4NAT, TemplateIPv6NAT
		fields += 4
		ws, wsp, wd, wdp := r.SrcAddr, r.SrcPort, r.DstAddr, r.DstPort
		if r.XlatSrcAddr.IsValid() {
			ws, wsp = r.XlatSrcAddr, r.XlatSrcPort
		}
		if r.XlatDstAddr.IsValid() {
			wd, wdp = r.XlatDstAddr, r.XlatDstPort
		}
		if a, ok := netip.AddrFromSlice(got.values[natSrc]); !ok || a != ws {
			t.Errorf("%v: post-NAT source %x, want %v", r.SrcAddr, got.values[natSrc], ws)
		}
		if a, ok := netip.AddrFromSlice(got.values[natDst]); !ok || a != wd {
			t.Errorf("%v: post-NAT destination %x, want %v", r.SrcAddr, got.values[natDst], wd)
		}
		if p := got.values[227]; len(p) != 2 || binary.BigEndian.Uint16(p) != wsp {
			t.Errorf("%v: post-NAPT source port %x, want %d", r.SrcAddr, p, wsp)
		}
		if p := got.values[228]; len(p) != 2 || binary.BigEndian.Uint16(p) != wdp {
			t.Errorf("%v: post-NAPT destination port %x, want %d", r.SrcAddr, p, wdp)
		}
	}
	if got.domain != domain {
		t.Errorf("%v: domain %d, want %d", r.SrcAddr, got.domain, domain)
	}
	if a, ok := netip.AddrFromSlice(got.values[src]); !ok || a != r.SrcAddr {
		t.Errorf("source address %x, want %v", got.values[src], r.SrcAddr)
	}
	if a, ok := netip.AddrFromSlice(got.values[dst]); !ok || a != r.DstAddr {
		t.Errorf("destination address %x, want %v", got.values[dst], r.DstAddr)
	}
	for ie, w := range want(r) {
		b, ok := got.values[ie]
		if !ok {
			t.Errorf("%v: IE %d missing", r.SrcAddr, ie)
			continue
		}
		var v uint64
		for _, x := range b {
			v = v<<8 | uint64(x)
		}
		if v != w {
			t.Errorf("%v proto %d: IE %d = %d, want %d", r.SrcAddr, r.Proto, ie, v, w)
		}
	}
	if n := len(got.values); n != fields {
		t.Errorf("%v: %d fields decoded, want %d", r.SrcAddr, n, fields)
	}
	if got.otherPEN != 0 {
		t.Errorf("%v: %d fields under another enterprise number", r.SrcAddr, got.otherPEN)
	}
	checkInterfaces(t, got.values[ieSubTemplateList], r)
	checkEnterprise(t, got.pen, r)
	if Enriched(r) {
		tmpl += variantEnriched
	}
	if r.HasDNS() {
		tmpl += variantDNS
	}
	if r.HasTLS() {
		tmpl += variantTLS
	}
	v := int(tmpl - TemplateIPv4)
	if r.HasTCP() {
		v += variantTCP
	}
	if Tunneled(r) {
		v += variantTunnel
	}
	tmpl = TemplateIPv4 + uint16(v+v/32) // one id skipped per 32 variants: 288 is TemplateInterface
	if got.template != tmpl {
		t.Errorf("%v: template %d, want %d", r.SrcAddr, got.template, tmpl)
	}
}

// udpExporter is an exporter of cfg sending to a new local UDP collector,
// closed when the test ends.
func udpExporter(t *testing.T, cfg Config) (*net.UDPConn, *Exporter) {
	t.Helper()
	col := udpCollector(t)
	cfg.Target = col.LocalAddr().String()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return col, e
}

func udpCollector(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// receive reads UDP messages until wantFlows data records were decoded.
func receive(t *testing.T, c *net.UDPConn, ts netflow.NetFlowTemplateSystem, wantFlows int) (msgs [][]byte, recs []decoded) {
	t.Helper()
	buf := make([]byte, 65536)
	for len(recs) < wantFlows {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %d messages, %d flows: %v", len(msgs), len(recs), err)
		}
		msg := bytes.Clone(buf[:n])
		msgs = append(msgs, msg)
		_, d, err := decode(t, ts, msg)
		if err != nil {
			t.Fatalf("goflow2 cannot decode message %d: %v", len(msgs), err)
		}
		recs = append(recs, d...)
	}
	return msgs, recs
}

// A batch of IPv4 TCP, IPv6 UDP, ICMP and ICMPv6 flows, sent over UDP and
// decoded by goflow2: every standard field equals the record's, the
// messages carry many flows each and none exceeds 1400 bytes.
func TestUDPDecodedByGoflow2(t *testing.T) {
	col, e := udpExporter(t, Config{DomainID: 42, MaxMessageBytes: DefaultMaxMessageBytes})
	batch := records(200)
	if err := e.Export(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	ts := netflow.CreateTemplateSystem()
	msgs, recs := receive(t, col, ts, len(batch))
	if len(recs) != len(batch) {
		t.Fatalf("decoded %d flows, want %d", len(recs), len(batch))
	}
	for i := range batch {
		check(t, recs[i], &batch[i], 42)
	}
	var seq uint32
	for i, m := range msgs {
		if len(m) > DefaultMaxMessageBytes {
			t.Errorf("message %d is %d bytes, over %d", i, len(m), DefaultMaxMessageBytes)
		}
		if s := binary.BigEndian.Uint32(m[8:]); s != seq {
			t.Errorf("message %d: sequence %d, want %d", i, s, seq)
		}
		p, d, _ := decode(t, ts, m)
		seq += uint32(len(d))
		if p.Length != uint16(len(m)) || p.Version != 10 {
			t.Errorf("message %d: version %d length %d (%d bytes)", i, p.Version, p.Length, len(m))
		}
	}
	checkFull(t, msgs, batch, DefaultMaxMessageBytes)
	t.Logf("%d flows in %d messages", len(batch), len(msgs))
}

// checkFull checks that msgs, the messages of batch, carry as many flows
// as fit: none is over max bytes, and each data message but the last had no
// room left for the flow that opens the next one (its record, and a set
// header unless it continues the message's last set).
func checkFull(t *testing.T, msgs [][]byte, batch []flow.Record, max int) {
	t.Helper()
	ts := netflow.CreateTemplateSystem()
	k, data := 0, 0
	for i, m := range msgs {
		if len(m) > max {
			t.Errorf("message %d is %d bytes, over %d", i, len(m), max)
		}
		_, d, err := decode(t, ts, m)
		if err != nil {
			t.Fatal(err)
		}
		k += len(d)
		if len(d) == 0 || k == len(batch) {
			continue
		}
		data++
		r := &batch[k]
		v := recordVariant(r)
		need := recordLen(r, v)
		if d[len(d)-1].template != templateID(v) {
			need += setHeaderLen
		}
		if len(m)+need <= max {
			t.Errorf("message %d: %d bytes, %d flows, had room for the next flow's %d bytes", i, len(m), len(d), need)
		}
	}
	if k != len(batch) {
		t.Errorf("%d flows in the messages, want %d", k, len(batch))
	}
	t.Logf("%d flows: %d full data messages then the last, %d messages in all", len(batch), data, len(msgs))
}

// translate gives some flows of records' batch a translation, as the xlat
// feature records it: IPv4 TCP DNAT (a Service's virtual IP to a backend),
// IPv6 UDP SNAT and DNAT both, IPv4 SNAT only (masquerade); the others stay
// untranslated.
func translate(batch []flow.Record) {
	for i := range batch {
		r := &batch[i]
		switch i % 12 {
		case 0: // IPv4 TCP, DNAT
			r.XlatDstAddr = netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)})
			r.XlatDstPort = 8443
		case 1: // IPv6 UDP, both sides
			r.XlatSrcAddr = netip.AddrFrom16([16]byte{0xfd, 0x00, 0xaa, 14: byte(i >> 8), 15: byte(i)})
			r.XlatSrcPort = uint16(30000 + i)
			r.XlatDstAddr = netip.MustParseAddr("fd00:10::35")
			r.XlatDstPort = 5353
		case 4: // IPv4 TCP, SNAT only (masquerade)
			r.XlatSrcAddr = netip.MustParseAddr("203.0.113.7")
			r.XlatSrcPort = uint16(61000 + i)
		}
	}
}

// Translated flows (xlat) use the NAT templates (258, 259) with the
// post-NAT addresses and ports, the others the small ones; goflow2 decodes
// both kinds from one batch.
func TestNATDecodedByGoflow2(t *testing.T) {
	col, e := udpExporter(t, Config{DomainID: 9})
	batch := records(120)
	translate(batch)
	if err := e.Export(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	_, recs := receive(t, col, netflow.CreateTemplateSystem(), len(batch))
	if len(recs) != len(batch) {
		t.Fatalf("decoded %d flows, want %d", len(recs), len(batch))
	}
	nat := 0
	for i := range batch {
		check(t, recs[i], &batch[i], 9)
		if recs[i].template == TemplateIPv4NAT || recs[i].template == TemplateIPv6NAT {
			nat++
		}
	}
	if nat != 30 {
		t.Errorf("%d flows in the NAT templates, want 30", nat)
	}
	// Without the interfaces list's content: 74 and 98 bytes plain.
	if recLen[0] != 74 || recLen[variantV6] != 98 || recLen[variantNAT] != 74+14 || recLen[variantNAT|variantV6] != 98+38 {
		t.Errorf("NAT record lengths %d, %d", recLen[variantNAT], recLen[variantNAT|variantV6])
	}
}

// enrich gives some flows of records' batch the enrichment fields: drops
// with a cause (one longer than MaxDropCause), RTT and retransmits, partial,
// sampling, several interfaces, unread headers; the others have none.
func enrich(batch []flow.Record) {
	long := strings.Repeat("SKB_DROP_REASON_", 20) // 320 bytes
	for i := range batch {
		r := &batch[i]
		r.Sampling = 1
		switch i % 10 {
		case 0:
			r.DropPackets, r.DropBytes, r.DropCause = uint64(i+1), uint64(1500*(i+1)), "SKB_DROP_REASON_NETFILTER_DROP"
		case 1:
			r.RTT, r.Retransmits = time.Duration(123456+i)*time.Nanosecond, uint64(i)
		case 2:
			r.Partial = true
		case 3:
			r.Sampling = 100
			r.Interfaces = append(r.Interfaces, flow.Interface{Name: "veth1", Ifindex: 7, Direction: flow.DirIngress},
				flow.Interface{Name: "cni0", Ifindex: 5, Direction: flow.DirEgress})
		case 5:
			r.DropPackets, r.DropCause = 1, long
			r.DropTCPState, r.DropTCPFlags = "TCP_ESTABLISHED_AND_A_STATE_NAME_TOO_LONG", 0x14
		case 6:
			r.RTTMax = time.Duration(2_000_000+i) * time.Nanosecond
			r.Interfaces = append(r.Interfaces, flow.Interface{Name: "a-name-longer-than-ifnamsiz", Ifindex: 9, Direction: flow.DirBoth})
		case 4:
			// Packets counted whose headers were not read to the end.
			r.L4Unread, r.FragUnmatched = true, true
		case 8:
			r.ExtUnread = true
		case 7:
			r.IfacesOverflow = true
			for k := range 6 {
				r.Interfaces = append(r.Interfaces, flow.Interface{Name: fmt.Sprintf("veth%d", k), Ifindex: uint32(20 + k), Direction: flow.DirBoth})
			}
		}
	}
}

// tunnels gives some flows of records' batch a tunnel, as the TC programs
// record a flow seen encapsulated on the uplink: VXLAN over IPv4, Geneve
// over IPv6 (an IPv4 flow in an IPv6 underlay and the reverse), IP-in-IP
// (no VNI); the others have none.
func tunnels(batch []flow.Record) {
	for i := range batch {
		r := &batch[i]
		switch i % 9 {
		case 1:
			r.Tunnel = flow.Tunnel{TunnelType: flow.TunnelVXLAN, TunnelSrcAddr: netip.MustParseAddr("10.0.0.1"),
				TunnelDstAddr: netip.MustParseAddr("10.0.0.2"), TunnelVNI: uint32(100 + i)}
		case 4:
			r.Tunnel = flow.Tunnel{TunnelType: flow.TunnelGeneve, TunnelSrcAddr: netip.MustParseAddr("fd00:1::1"),
				TunnelDstAddr: netip.MustParseAddr("fd00:1::2"), TunnelVNI: 0xabcdef}
		case 8:
			r.Tunnel = flow.Tunnel{TunnelType: flow.TunnelIPIP, TunnelSrcAddr: netip.MustParseAddr("172.16.0.1"),
				TunnelDstAddr: netip.MustParseAddr("172.16.0.2")}
		case 7:
			// A tunnel flow's own record (--overlay-outer-flows).
			r.Tunnel = flow.Tunnel{TunnelType: flow.TunnelVXLAN, TunnelSrcAddr: r.SrcAddr, TunnelDstAddr: r.DstAddr,
				TunnelVNI: 7, OverlayOuter: true}
		}
	}
}

// dnsTLS gives some flows of records' batch the DNS fields (a query
// answered, one unanswered, an answer on the server's flow, a name longer
// than MaxDNSName), others the TLS fields (a ServerHello, a ClientHello,
// QUIC), some both; the others have neither.
func dnsTLS(batch []flow.Record) {
	long := strings.Repeat("label63-", 40) + "example.com" // 331 bytes
	for i := range batch {
		r := &batch[i]
		switch i % 7 {
		case 0:
			r.DNSID, r.DNSFlags, r.DNSName = uint16(1000+i), flow.DNSFlagRD, "kubernetes.default.svc.cluster.local"
			r.DNSLatency, r.DNSLatencyMax = time.Duration(250_000+i), time.Duration(900_000+i)
		case 1:
			r.DNSID, r.DNSFlags, r.DNSName, r.DNSTimeout = uint16(2000+i), flow.DNSFlagRD, "slow.example.", true
		case 2:
			r.DNSID, r.DNSFlags, r.DNSRcode, r.DNSName = uint16(3000+i), flow.DNSFlagQR|flow.DNSFlagRA|3, 3, "nx.example.org"
			r.TLSVersion, r.TLSCipherSuite, r.TLSGroup = 0x0304, 0x1301, 0x001d
		case 3:
			r.DNSID, r.DNSName, r.DNSNameTruncated = uint16(i), long, true
		case 4:
			r.TLSVersion, r.TLSCipherSuite = 0x0303, 0xc02f
		case 5:
			r.TLSClientHello, r.QUIC = true, true
		}
	}
}

// checkEnterprise checks the enterprise-specific elements goflow2 decoded
// under EnterpriseNumber for r (pen): exactly those of the groups r has.
func checkEnterprise(t *testing.T, pen map[uint16][]byte, r *flow.Record) {
	t.Helper()
	for id, w := range wantEnterprise(r) {
		if got, ok := pen[id]; !ok || !bytes.Equal(got, w) {
			t.Errorf("%v: enterprise field %d = %x, want %x", r.SrcAddr, id, got, w)
		}
	}
	if len(pen) != len(wantEnterprise(r)) {
		t.Errorf("%v: %d enterprise fields, want %d", r.SrcAddr, len(pen), len(wantEnterprise(r)))
	}
}

// wantEnterprise returns the value (bytes) of each enterprise-specific
// element r must carry, by element id: the NAT zone for a translated flow,
// the enrichment group for an enriched one, the DNS and TLS groups when r
// has those fields.
func wantEnterprise(r *flow.Record) map[uint16][]byte {
	be := binary.BigEndian
	u16 := func(v uint16) []byte { return be.AppendUint16(nil, v) }
	u64 := func(v uint64) []byte { return be.AppendUint64(nil, v) }
	boolean := func(v bool) []byte {
		if v {
			return []byte{1}
		}
		return []byte{2}
	}
	m := map[uint16][]byte{}
	if r.Translated() {
		m[1013] = u16(r.XlatZoneID)
	}
	if Enriched(r) {
		cause, state := r.DropCause, r.DropTCPState
		if len(cause) > MaxDropCause {
			cause = cause[:MaxDropCause]
		}
		if len(state) > MaxDropTCPState {
			state = state[:MaxDropTCPState]
		}
		m[1001], m[1002], m[1003] = u64(r.DropPackets), u64(r.DropBytes), []byte(cause)
		m[1004], m[1005] = u64(uint64(r.RTT)), u64(r.Retransmits)
		m[1006] = be.AppendUint32(nil, r.Sampling)
		m[1007], m[1008] = boolean(r.Partial), []byte{byte(len(r.Interfaces))}
		m[1009], m[1010], m[1011] = u64(uint64(r.RTTMax)), []byte(state), u16(r.DropTCPFlags)
		m[1012] = boolean(r.IfacesOverflow || len(r.Interfaces) > MaxInterfaces)
		m[1056], m[1057], m[1058] = boolean(r.L4Unread), boolean(r.ExtUnread), boolean(r.FragUnmatched)
	}
	if r.HasDNS() {
		name := r.DNSName
		if len(name) > MaxDNSName {
			name = name[:MaxDNSName]
		}
		m[1020], m[1021], m[1022] = u16(r.DNSID), u16(r.DNSFlags), []byte{r.DNSRcode}
		m[1023], m[1024] = []byte(name), boolean(r.DNSNameTruncated || len(r.DNSName) > MaxDNSName)
		m[1025], m[1026] = u64(uint64(r.DNSLatency)), u64(uint64(r.DNSLatencyMax))
		m[1027] = boolean(r.DNSTimeout)
	}
	if r.HasTLS() {
		m[1030], m[1031], m[1032] = u16(r.TLSVersion), u16(r.TLSCipherSuite), u16(r.TLSGroup)
		m[1033], m[1034] = boolean(r.TLSClientHello), boolean(r.QUIC)
	}
	if r.HasTCP() {
		m[1040] = []byte{byte(r.TCPRole)}
		m[1041], m[1042], m[1043] = u64(r.TCPConnects), u64(r.TCPRefused), u64(r.TCPTimeouts)
		m[1044], m[1045], m[1046] = u64(r.TCPSynRetrans), u64(r.TCPResets), u64(r.TCPZeroWindows)
		m[1047], m[1048] = u64(uint64(r.TCPHandshake)), u64(uint64(r.TCPHandshakeMax))
	}
	if Tunneled(r) {
		tn := &r.Tunnel
		a4 := func(a netip.Addr) []byte {
			if a.Is4() {
				return a.AsSlice()
			}
			return make([]byte, 4)
		}
		a16 := func(a netip.Addr) []byte {
			if a.Is6() {
				return a.AsSlice()
			}
			return make([]byte, 16)
		}
		m[1049] = []byte{byte(tn.TunnelType)}
		m[1050], m[1051] = a4(tn.TunnelSrcAddr), a4(tn.TunnelDstAddr)
		m[1052], m[1053] = a16(tn.TunnelSrcAddr), a16(tn.TunnelDstAddr)
		m[1054] = be.AppendUint32(nil, tn.TunnelVNI)
		m[1055] = boolean(tn.OverlayOuter)
	}
	return m
}

// listEntry is one entry of the interfaces list as decoded from the wire.
type listEntry struct {
	name    string
	in, out uint32
}

// parseInterfaces decodes the interfaces list (the content of a
// subTemplateList, RFC 6313 §4.5.3, which goflow2 hands over as bytes):
// semantic, template id, then entries of TemplateInterface's fields.
func parseInterfaces(b []byte) (semantic uint8, template uint16, entries []listEntry, err error) {
	if len(b) < 3 {
		return 0, 0, nil, fmt.Errorf("list of %d bytes", len(b))
	}
	semantic, template, b = b[0], binary.BigEndian.Uint16(b[1:]), b[3:]
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+8 {
			return semantic, template, entries, fmt.Errorf("entry %d cut short: %x", len(entries), b)
		}
		entries = append(entries, listEntry{string(b[1 : 1+n]), binary.BigEndian.Uint32(b[1+n:]), binary.BigEndian.Uint32(b[5+n:])})
		b = b[9+n:]
	}
	return semantic, template, entries, nil
}

// wantInterfaces is r's interfaces list as it must be decoded.
func wantInterfaces(r *flow.Record) (out []listEntry) {
	for i, it := range r.Interfaces {
		if i == MaxInterfaces {
			break
		}
		e := listEntry{name: it.Name}
		if len(e.name) > MaxInterfaceName {
			e.name = e.name[:MaxInterfaceName]
		}
		if it.Direction == flow.DirIngress || it.Direction == flow.DirBoth {
			e.in = it.Ifindex
		}
		if it.Direction == flow.DirEgress || it.Direction == flow.DirBoth {
			e.out = it.Ifindex
		}
		out = append(out, e)
	}
	return out
}

// checkInterfaces checks the interfaces list goflow2 decoded for r.
func checkInterfaces(t *testing.T, b []byte, r *flow.Record) {
	t.Helper()
	sem, tmpl, got, err := parseInterfaces(b)
	if err != nil {
		t.Errorf("%v: interfaces list: %v", r.SrcAddr, err)
		return
	}
	if sem != 4 || tmpl != TemplateInterface {
		t.Errorf("%v: interfaces list semantic %d template %d, want 4 (ordered) %d", r.SrcAddr, sem, tmpl, TemplateInterface)
	}
	if fmt.Sprint(got) != fmt.Sprint(wantInterfaces(r)) {
		t.Errorf("%v: interfaces %v, want %v", r.SrcAddr, got, wantInterfaces(r))
	}
}

// Flows with enrichment (drops, RTT, retransmits, partial, sampling) use the
// Enriched templates (260 to 263), with flowlens's enterprise-specific
// elements under EnterpriseNumber, translated or not; goflow2 decodes every
// one, standard and enterprise, mixed with plain flows in one batch.
func TestEnrichedDecodedByGoflow2(t *testing.T) {
	col, e := udpExporter(t, Config{DomainID: 5, MaxMessageBytes: DefaultMaxMessageBytes})
	batch := records(240)
	translate(batch)
	enrich(batch)
	dnsTLS(batch)
	tunnels(batch)
	if err := e.Export(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	msgs, recs := receive(t, col, netflow.CreateTemplateSystem(), len(batch))
	if len(recs) != len(batch) {
		t.Fatalf("decoded %d flows, want %d", len(recs), len(batch))
	}
	perTemplate := map[uint16]int{}
	for i := range batch {
		check(t, recs[i], &batch[i], 5)
		perTemplate[recs[i].template]++
	}
	checkFull(t, msgs, batch, DefaultMaxMessageBytes)
	t.Logf("%d flows in %d messages, per template %v", len(batch), len(msgs), perTemplate)
}

// Every one of the 64 templates (address family × NAT × enrichment × DNS ×
// TLS × TCP × tunnel) is decoded by goflow2 to the record's values, in one batch.
func TestEveryTemplateDecodedByGoflow2(t *testing.T) {
	col, e := udpExporter(t, Config{DomainID: 11})
	base := records(variants * 2)
	var batch []flow.Record
	for v := range variants {
		r := base[v*2] // IPv4 TCP or ICMP
		if v&variantV6 != 0 {
			r = base[v*2+1] // IPv6 UDP or ICMPv6
		}
		if v&variantNAT != 0 {
			r.XlatDstAddr, r.XlatDstPort, r.XlatZoneID = r.DstAddr, 8080, uint16(v)
		}
		if v&variantEnriched != 0 {
			r.RTT, r.RTTMax, r.DropTCPState = time.Duration(v)*time.Microsecond, time.Millisecond, "SYN_SENT"
		}
		if v&variantDNS != 0 {
			r.DNSID, r.DNSName, r.DNSLatency = uint16(v), "svc.example", time.Duration(v)*time.Millisecond
		}
		if v&variantTLS != 0 {
			r.TLSVersion, r.TLSGroup, r.QUIC = 0x0304, 0x11ec, true
		}
		if v&variantTCP != 0 {
			r.TCPRole, r.TCPConnects, r.TCPHandshake = flow.TCPRoleServer, uint64(v), time.Duration(v)*time.Microsecond
		}
		if v&variantTunnel != 0 {
			r.Tunnel = flow.Tunnel{TunnelType: flow.TunnelGeneve, TunnelSrcAddr: netip.MustParseAddr("192.0.2.10"),
				TunnelDstAddr: netip.MustParseAddr("192.0.2.11"), TunnelVNI: uint32(v)}
		}
		batch = append(batch, r)
	}
	if err := e.Export(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	_, recs := receive(t, col, netflow.CreateTemplateSystem(), len(batch))
	for i := range batch {
		check(t, recs[i], &batch[i], 11)
		if want := templateID(i); recs[i].template != want {
			t.Errorf("flow %d: template %d, want %d", i, recs[i].template, want)
		}
	}
}

// With the smallest message size (512 bytes) the eight templates do not fit
// in one message: they go in template-only messages, the last set opening
// the first data message; goflow2 decodes everything, no message is larger.
func TestTemplatesSplitInSmallMessages(t *testing.T) {
	col, e := udpExporter(t, Config{DomainID: 3, MaxMessageBytes: ipfixsize.Min})
	if len(e.templates) < 2 {
		t.Fatalf("%d template sets at %d bytes, want several", len(e.templates), ipfixsize.Min)
	}
	batch := records(60)
	translate(batch)
	enrich(batch)
	if err := e.Export(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	msgs, recs := receive(t, col, netflow.CreateTemplateSystem(), len(batch))
	for i := range batch {
		check(t, recs[i], &batch[i], 3)
	}
	var seq uint32
	templateOnly := 0
	ts := netflow.CreateTemplateSystem()
	for i, m := range msgs {
		if len(m) > ipfixsize.Min {
			t.Errorf("message %d is %d bytes, over %d", i, len(m), ipfixsize.Min)
		}
		if s := binary.BigEndian.Uint32(m[8:]); s != seq {
			t.Errorf("message %d: sequence %d, want %d", i, s, seq)
		}
		_, d, err := decode(t, ts, m)
		if err != nil {
			t.Fatal(err)
		}
		if len(d) == 0 {
			templateOnly++
		}
		seq += uint32(len(d))
	}
	// The last set opens the first data message, or goes alone when that
	// message has no room left for a record.
	if templateOnly != len(e.templates)-1 && templateOnly != len(e.templates) {
		t.Errorf("%d template-only messages for %d template sets", templateOnly, len(e.templates))
	}
	t.Logf("%d template sets, %d template-only messages, %d messages", len(e.templates), templateOnly, len(msgs))
	if got := e.Stats.Templates.Load(); got != 1 {
		t.Errorf("templates sent %d times, want 1", got)
	}
	if got := e.Stats.Records.Load(); got != uint64(len(batch)) {
		t.Errorf("%d flows counted, want %d", got, len(batch))
	}
}

// An IPv4-mapped translated address goes out as IPv4; an address of the
// other family (not produced by xlat) leaves that side as it was.
func TestPostNAT(t *testing.T) {
	r := flow.Record{SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("10.96.0.10"),
		SrcPort: 1234, DstPort: 53,
		XlatFields: flow.XlatFields{XlatSrcAddr: netip.MustParseAddr("2001:db8::1"), XlatSrcPort: 9, XlatDstAddr: netip.MustParseAddr("::ffff:10.244.1.5"), XlatDstPort: 5353}}
	s, sp, d, dp := PostNAT(&r)
	if s != r.SrcAddr || sp != 1234 || d != netip.MustParseAddr("10.244.1.5") || dp != 5353 {
		t.Errorf("PostNAT = %v %d %v %d", s, sp, d, dp)
	}
}

// A collector that restarts (a new decoder state, no templates) cannot
// decode until the templates come again; the refresh interval brings them
// in the next message after it elapses.
func TestTemplateResentAfterCollectorRestart(t *testing.T) {
	col, e := udpExporter(t, Config{DomainID: DefaultDomainID, TemplateRefresh: time.Minute})
	now := time.Unix(1_700_000_000, 0)
	e.now = func() time.Time { return now }
	batch := records(4)
	ctx := context.Background()

	if err := e.Export(ctx, batch); err != nil {
		t.Fatal(err)
	}
	receive(t, col, netflow.CreateTemplateSystem(), len(batch))

	// The collector restarts: its new state knows no template.
	restarted := netflow.CreateTemplateSystem()
	now = now.Add(30 * time.Second) // before the refresh: data sets only
	if err := e.Export(ctx, batch); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	col.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := col.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := decode(t, restarted, bytes.Clone(buf[:n])); err == nil {
		t.Fatal("a message without templates decoded by a collector that knows none")
	}

	now = now.Add(30 * time.Second) // the refresh is due
	if err := e.Export(ctx, batch); err != nil {
		t.Fatal(err)
	}
	_, recs := receive(t, col, restarted, len(batch))
	for i := range batch {
		check(t, recs[i], &batch[i], DefaultDomainID)
	}
	if got := e.Stats.Templates.Load(); got != 2 {
		t.Errorf("templates sent %d times, want 2", got)
	}
}

// tcpResult is what a TCP collector (tcpCollect) got: the messages and
// their data records as goflow2 decoded them.
type tcpResult struct {
	msgs [][]byte
	recs []decoded
	err  error
}

// tcpCollect is a TCP collector: it accepts one connection on ln, decodes
// its messages (framed by their length field) with goflow2 and a new
// template state until want data records came, then closes the connection.
func tcpCollect(ln net.Listener, want int) <-chan tcpResult {
	done := make(chan tcpResult, 1)
	go func() {
		var res tcpResult
		defer func() { done <- res }()
		c, err := ln.Accept()
		if err != nil {
			res.err = err
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		ts := netflow.CreateTemplateSystem()
		for len(res.recs) < want {
			hdr := make([]byte, 4)
			if _, res.err = io.ReadFull(c, hdr); res.err != nil {
				return
			}
			msg := make([]byte, binary.BigEndian.Uint16(hdr[2:]))
			copy(msg, hdr)
			if _, res.err = io.ReadFull(c, msg[4:]); res.err != nil {
				return
			}
			var p netflow.IPFIXPacket
			var v9 netflow.NFv9Packet
			if err := netflow.DecodeMessageVersion(bytes.NewBuffer(msg), ts, &v9, &p); err != nil {
				res.err = fmt.Errorf("goflow2: %w", err)
				return
			}
			res.msgs = append(res.msgs, msg)
			res.recs = append(res.recs, dataRecords(p)...)
		}
	}()
	return done
}

// Over TCP the templates open the stream; messages are framed by their
// length field, and as large as the default allows (65535 bytes).
func TestTCPDecodedByGoflow2(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	batch := records(1000)
	enrich(batch)
	dnsTLS(batch)
	done := tcpCollect(ln, len(batch))
	e, err := New(Config{Target: ln.Addr().String(), Transport: "tcp", DomainID: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Export(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	for i := range batch {
		check(t, res.recs[i], &batch[i], 7)
	}
	checkFull(t, res.msgs, batch, DefaultMaxMessageBytesTCP)
}

// A TCP collector that goes away and comes back (a new goflow2 state, on
// the same address): the exporter notices the closed stream, retries with
// backoff while nothing listens, and on the new connection sends the
// templates first and restarts the sequence; the new collector decodes
// every flow of the batch exported meanwhile, none lost.
func TestTCPReconnectsAfterCollectorRestart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	first, second := records(50), records(80)
	enrich(second)
	done := tcpCollect(ln, len(first))
	e, err := New(Config{Target: addr, Transport: "tcp", DomainID: 8,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	if err := e.Export(ctx, first); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.err != nil || len(res.recs) != len(first) {
		t.Fatalf("first collector: %d flows, %v", len(res.recs), res.err)
	}
	ln.Close() // the collector is gone: its connection closed, nothing listens
	for deadline := time.Now().Add(10 * time.Second); e.Connected(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the exporter did not notice the collector closing the connection")
		}
	}

	exported := make(chan error, 1)
	go func() { exported <- e.Export(ctx, second) }()
	for e.Stats.SendErrors.Load() < 2 { // refused twice at least: backing off
		time.Sleep(time.Millisecond)
	}
	ln, err = net.Listen("tcp", addr) // the collector restarts
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	res := <-tcpCollect(ln, len(second))
	if err := <-exported; err != nil {
		t.Fatalf("Export across the restart: %v", err)
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	for i := range second {
		check(t, res.recs[i], &second[i], 8)
	}
	if s := binary.BigEndian.Uint32(res.msgs[0][8:]); s != 0 {
		t.Errorf("first message of the new connection: sequence %d, want 0", s)
	}
	if c, tm, l := e.Stats.Connects.Load(), e.Stats.Templates.Load(), e.Stats.FailedFlows.Load(); c != 2 || tm != 2 || l != 0 {
		t.Errorf("%d connections, templates sent %d times, %d flows lost; want 2, 2, 0", c, tm, l)
	}
}

// A TCP collector that is down: Export keeps trying, with backoff, until
// its context ends, then fails with the connection's error; the flows are
// counted lost.
func TestTCPCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e, err := New(Config{Target: addr, Transport: "tcp", DialTimeout: time.Second,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for e.Stats.SendErrors.Load() < 3 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	err = e.Export(ctx, records(3))
	var op *net.OpError
	if !errors.As(err, &op) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Export to a closed port: %v, want a connection error and the cancellation", err)
	}
	if got := e.Stats.FailedFlows.Load(); got != 3 {
		t.Errorf("%d flows counted lost, want 3", got)
	}
	if e.Connected() {
		t.Error("connected to a closed port")
	}
}

// The wait before each connection attempt doubles from the base to the cap.
func TestBackoff(t *testing.T) {
	var got []time.Duration
	for f := 1; f <= 8; f++ {
		got = append(got, backoff(f, time.Second, 30*time.Second))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		30 * time.Second, 30 * time.Second, 30 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("backoff %v, want %v", got, want)
	}
}

func TestOctetDeltaCount(t *testing.T) {
	eth := flow.Record{Bytes: 1514 * 3, Packets: 3, SrcMAC: [6]byte{2}}
	if got := OctetDeltaCount(&eth); got != 1500*3 {
		t.Errorf("Ethernet: %d, want %d", got, 1500*3)
	}
	l3 := flow.Record{Bytes: 1500 * 3, Packets: 3} // _l3 programs: no MACs
	if got := OctetDeltaCount(&l3); got != 1500*3 {
		t.Errorf("no L2 header: %d, want %d", got, 1500*3)
	}
	odd := flow.Record{Bytes: 10, Packets: 3, DstMAC: [6]byte{2}}
	if got := OctetDeltaCount(&odd); got != 0 {
		t.Errorf("fewer bytes than headers: %d, want 0", got)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "no target (host:port)"},
		{Config{Target: "collector"}, `target "collector": address collector: missing port in address`},
		{Config{Target: "collector:0"}, `target "collector:0": port must be a number from 1 to 65535`},
		{Config{Target: ":4739"}, `target ":4739": no host`},
		{Config{Target: "collector:4739", Transport: "sctp"}, `transport "sctp": must be udp or tcp`},
		{Config{Target: "collector:4739", MaxMessageBytes: 100}, "max message bytes 100: must be 0 (the default) or from 1024 to 65507 over udp"},
		{Config{Target: "collector:4739", MaxMessageBytes: 65508}, "max message bytes 65508: must be 0 (the default) or from 1024 to 65507 over udp"},
		{Config{Target: "collector:4739", Transport: "tcp", MaxMessageBytes: 65536}, "max message bytes 65536: must be 0 (the default) or from 1024 to 65535 over tcp"},
	} {
		_, err := New(tc.cfg)
		if err == nil || err.Error() != tc.want {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// Steady state costs no allocation per flow (nor per batch), every group
// of fields included, sent over a real UDP socket.
func TestExportAllocations(t *testing.T) {
	_, e := udpExporter(t, Config{})
	batch := records(1000)
	translate(batch)
	enrich(batch)
	dnsTLS(batch)
	tunnels(batch)
	ctx := context.Background()
	if err := e.Export(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(20, func() { _ = e.Export(ctx, batch) }); a != 0 {
		t.Errorf("%.1f allocations per batch of %d flows, want 0", a, len(batch))
	}
}

// The smallest message holds the largest record after its headers.
func TestLargestRecordFits(t *testing.T) {
	if n := headerLen + setHeaderLen + maxRecordLen; n > ipfixsize.Min {
		t.Errorf("largest record needs a %d-byte message, over ipfixsize.Min %d", n, ipfixsize.Min)
	}
	r := records(2)[1] // IPv6
	r.XlatSrcAddr = netip.MustParseAddr("fd00::1")
	r.DropCause, r.DropTCPState, r.DNSName = strings.Repeat("c", 300), strings.Repeat("s", 50), strings.Repeat("n", 300)
	r.TLSVersion, r.Partial = 0x0304, true
	r.TCPRole = flow.TCPRoleClient
	r.Tunnel = flow.Tunnel{TunnelType: flow.TunnelVXLAN, TunnelSrcAddr: netip.MustParseAddr("fd00::a"), TunnelDstAddr: netip.MustParseAddr("fd00::b"), TunnelVNI: 1}
	r.Interfaces = nil
	for range 8 {
		r.Interfaces = append(r.Interfaces, flow.Interface{Name: strings.Repeat("i", 20), Direction: flow.DirBoth})
	}
	v := recordVariant(&r)
	if v != variants-1 {
		t.Fatalf("variant %d, want every group", v)
	}
	if n := len(appendRecord(nil, &r, v)); n != maxRecordLen || recordLen(&r, v) != n {
		t.Errorf("largest record %d bytes (recordLen %d), maxRecordLen %d", n, recordLen(&r, v), maxRecordLen)
	}
	t.Logf("largest record %d bytes", maxRecordLen)

	// recordLen, which sizes the messages, is the length appended.
	batch := records(420)
	translate(batch)
	enrich(batch)
	dnsTLS(batch)
	for i := range batch {
		v := recordVariant(&batch[i])
		if n, want := recordLen(&batch[i], v), len(appendRecord(nil, &batch[i], v)); n != want {
			t.Errorf("flow %d (variant %d): recordLen %d, appended %d bytes", i, v, n, want)
		}
	}
}

// A site's own enterprise number (Config.EnterpriseNumber) replaces the
// documentation PEN in every template: goflow2 decodes the enterprise
// elements under it and none under 32473.
func TestEnterpriseNumber(t *testing.T) {
	col, e := udpExporter(t, Config{EnterpriseNumber: 4242})
	batch := records(40)
	enrich(batch)
	dnsTLS(batch)
	if err := e.Export(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	_, recs := receive(t, col, netflow.CreateTemplateSystem(), len(batch))
	want := 0
	for i := range batch {
		if len(recs[i].pen) != 0 {
			t.Fatalf("flow %d: %d elements under PEN %d", i, len(recs[i].pen), EnterpriseNumber)
		}
		if n := recs[i].pens[4242]; n != recs[i].otherPEN || n != len(wantEnterprise(&batch[i])) {
			t.Errorf("flow %d: %d elements under PEN 4242 (%v), want %d", i, n, recs[i].pens, len(wantEnterprise(&batch[i])))
		}
		want += recs[i].otherPEN
	}
	if want == 0 {
		t.Fatal("no enterprise element exported")
	}
}

// Close ends an Export that waits for an unreachable TCP collector: the
// exporter closed is the reason given, and the batch is counted lost.
func TestCloseEndsReconnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e, err := New(Config{Target: addr, Transport: "tcp", BackoffBase: time.Hour, BackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	exported := make(chan error, 1)
	go func() { exported <- e.Export(context.Background(), records(5)) }()
	for e.Stats.SendErrors.Load() < 1 { // refused once: now waiting an hour
		time.Sleep(time.Millisecond)
	}
	e.Close()
	if err := <-exported; !errors.Is(err, errClosed) {
		t.Fatalf("Export after Close: %v, want %v", err, errClosed)
	}
	if got := e.Stats.FailedFlows.Load(); got != 5 {
		t.Errorf("%d flows counted lost, want 5", got)
	}
}

// Connected answers while an Export waits to reconnect (it holds the
// exporter's lock for that long): a metrics scrape never blocks on it.
func TestConnectedWhileReconnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e, err := New(Config{Target: addr, Transport: "tcp", BackoffBase: time.Hour, BackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	exported := make(chan error, 1)
	go func() { exported <- e.Export(context.Background(), records(1)) }()
	for e.Stats.SendErrors.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	if e.Connected() {
		t.Error("connected to a closed port")
	}
	e.Close()
	<-exported
}

// recLen, summed from the blocks' lengths at start, is each variant's
// template's fixed length.
func TestRecLenIsTemplateLength(t *testing.T) {
	for v := range variants {
		if want := fixedLen(templateFields(v)); recLen[v] != want {
			t.Errorf("variant %#x: recLen %d, its template's fixed length %d", v, recLen[v], want)
		}
	}
}

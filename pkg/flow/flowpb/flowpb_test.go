package flowpb_test

import (
	"errors"
	"math"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

func sampleRecords() []flow.Record {
	t0 := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.Local)
	return []flow.Record{
		{
			SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("10.0.0.2"),
			SrcPort: 40000, DstPort: 443, Proto: 6, Bytes: 1500, Packets: 3,
			TCPFlags: 0x12 | flow.TCPFlagSynAck, EthType: 0x0800, DSCP: 46,
			SrcMAC: [6]byte{2, 0, 0, 0, 0, 0xa}, DstMAC: [6]byte{2, 0, 0, 0, 0, 0xb},
			StartTime: t0, EndTime: t0.Add(1500 * time.Millisecond),
			Interfaces: []flow.Interface{
				{Name: "veth0", Ifindex: 7, Netns: "pod-a", NetnsID: 0xc0ffee, Direction: flow.DirIngress},
				{Name: "eth0", Ifindex: 2, Netns: "host", NetnsID: 1, Direction: flow.DirBoth},
			},
			IfacesOverflow: true, Sampling: 1,
			Tunnel: flow.Tunnel{TunnelType: flow.TunnelVXLAN, TunnelSrcAddr: netip.MustParseAddr("192.168.50.1"),
				TunnelDstAddr: netip.MustParseAddr("192.168.50.2"), TunnelVNI: 0xffffff},
			DropsFields:       flow.DropsFields{DropPackets: 1, DropBytes: 60, DropCause: "NETFILTER_DROP", DropTCPState: "SYN_SENT", DropTCPFlags: 2},
			RTTFields:         flow.RTTFields{RTT: 1200 * time.Microsecond, RTTMax: 3 * time.Millisecond},
			RetransmitsFields: flow.RetransmitsFields{Retransmits: 4},
			XlatFields: flow.XlatFields{ // DNAT of a Service VIP to a backend (feature xlat).
				XlatSrcAddr: netip.MustParseAddr("10.0.0.1"), XlatSrcPort: 40000, XlatDstAddr: netip.MustParseAddr("10.244.1.7"), XlatDstPort: 8443, XlatZoneID: 3},
			TLSFields: flow.TLSFields{ // A TLS 1.3 ServerHello (feature tls).
				TLSVersion: 0x0304, TLSCipherSuite: 0x1302, TLSGroup: 0x11ec},
			DNSFields: flow.DNSFields{ // A query answered NXDOMAIN (feature dns).
				DNSID: 0xbeef, DNSFlags: 0x0100, DNSRcode: 3, DNSName: `kubernetes.default.svc\.x\255`, DNSLatency: 1500 * time.Microsecond, DNSLatencyMax: 4 * time.Millisecond},
		},
		{
			SrcAddr: netip.MustParseAddr("fd00::1"), DstAddr: netip.MustParseAddr("fd00::2"),
			Proto: 58, IcmpType: 128, Bytes: 104, Packets: 1, EthType: 0x86dd,
			StartTime: t0, EndTime: t0, Sampling: 1, Partial: true,
			Tunnel: flow.Tunnel{TunnelType: flow.TunnelIPIP, TunnelSrcAddr: netip.MustParseAddr("fd50::1"), TunnelDstAddr: netip.MustParseAddr("fd50::2"),
				OverlayOuter: true}, // a tunnel flow's own record (--overlay-outer-flows)
			XlatFields: flow.XlatFields{ // SNAT of an IPv6 source, zone 0.
				XlatSrcAddr: netip.MustParseAddr("fd00:ffff::9"), XlatSrcPort: 61000, XlatDstAddr: netip.MustParseAddr("fd00::2")},
			TLSFields: flow.TLSFields{ // A ClientHello, a QUIC flag, and values no table names.
				TLSVersion: 0xfefd, TLSCipherSuite: 0xffff, TLSClientHello: true, QUIC: true},
			DNSFields: flow.DNSFields{ // An unanswered query with a truncated name, timed out.
				DNSID: 0xffff, DNSFlags: 0xffff, DNSRcode: 255, DNSName: "www.exam", DNSNameTruncated: true, DNSTimeout: true},
		},
		{}, // all zero: zero addresses and times must survive too
	}
}

func TestRoundTripJSON(t *testing.T) {
	enc := flowpb.NewEncoder(flowpb.Identity{NodeName: "node-1", AgentIP: netip.MustParseAddr("192.168.1.10")})
	recs := sampleRecords()
	msgs := enc.Encode(recs)
	// Through the wire format, as a collector would see them.
	wire, err := proto.Marshal(&flowv1.FlowBatch{Flows: msgs})
	if err != nil {
		t.Fatal(err)
	}
	var got flowv1.FlowBatch
	if err := proto.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	back, err := flowpb.ToRecords(nil, got.Flows)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(recs) {
		t.Fatalf("%d records back, want %d", len(back), len(recs))
	}
	for i := range recs {
		want := string(recs[i].AppendJSON(nil))
		if g := string(back[i].AppendJSON(nil)); g != want {
			t.Errorf("flow %d:\n got %s\nwant %s", i, g, want)
		}
		var one flow.Record
		if err := flowpb.ToRecord(&one, got.Flows[i]); err != nil {
			t.Fatal(err)
		}
		if g := string(one.AppendJSON(nil)); g != want {
			t.Errorf("ToRecord flow %d:\n got %s\nwant %s", i, g, want)
		}
		if got.Flows[i].NodeName != "node-1" || flowpb.Addr(got.Flows[i].AgentIp) != netip.MustParseAddr("192.168.1.10") {
			t.Errorf("identity: %q %x", got.Flows[i].NodeName, got.Flows[i].AgentIp)
		}
	}
	if !back[2].StartTime.IsZero() || back[2].SrcAddr.IsValid() {
		t.Errorf("zero record came back as %+v", back[2])
	}
	if len(got.Flows[0].SrcAddr) != 4 || len(got.Flows[1].SrcAddr) != 16 {
		t.Errorf("address lengths %d, %d; want 4 and 16", len(got.Flows[0].SrcAddr), len(got.Flows[1].SrcAddr))
	}
	// Translation fields, both ways, exactly (not only their JSON).
	for i := range recs {
		w, g := &recs[i], &back[i]
		if g.XlatSrcAddr != w.XlatSrcAddr || g.XlatSrcPort != w.XlatSrcPort || g.XlatDstAddr != w.XlatDstAddr ||
			g.XlatDstPort != w.XlatDstPort || g.XlatZoneID != w.XlatZoneID || g.Translated() != w.Translated() {
			t.Errorf("flow %d: xlat %v:%d → %v:%d zone %d, want %v:%d → %v:%d zone %d", i,
				g.XlatSrcAddr, g.XlatSrcPort, g.XlatDstAddr, g.XlatDstPort, g.XlatZoneID,
				w.XlatSrcAddr, w.XlatSrcPort, w.XlatDstAddr, w.XlatDstPort, w.XlatZoneID)
		}
	}
	f0, f2 := got.Flows[0], got.Flows[2]
	x0, x1, x2 := f0.GetXlat(), got.Flows[1].GetXlat(), f2.GetXlat()
	if len(x0.GetXlatSrcAddr()) != 4 || len(x0.GetXlatDstAddr()) != 4 || len(x1.GetXlatSrcAddr()) != 16 ||
		x0.GetXlatSrcPort() != 40000 || x0.GetXlatDstPort() != 8443 || x0.GetXlatZoneId() != 3 {
		t.Errorf("xlat on the wire: %x:%d → %x:%d zone %d", x0.GetXlatSrcAddr(), x0.GetXlatSrcPort(), x0.GetXlatDstAddr(), x0.GetXlatDstPort(), x0.GetXlatZoneId())
	}
	if x2.GetXlatSrcAddr() != nil || x2.GetXlatDstAddr() != nil || back[2].Translated() {
		t.Errorf("untranslated flow came back with xlat %x → %x", x2.GetXlatSrcAddr(), x2.GetXlatDstAddr())
	}
	// TLS fields: numbers on the wire, both ways exactly.
	for i := range recs {
		w, g := &recs[i], &back[i]
		if g.TLSVersion != w.TLSVersion || g.TLSCipherSuite != w.TLSCipherSuite || g.TLSGroup != w.TLSGroup ||
			g.TLSClientHello != w.TLSClientHello || g.QUIC != w.QUIC || g.HasTLS() != w.HasTLS() {
			t.Errorf("flow %d: tls %#04x %#04x %#04x client %v quic %v, want %#04x %#04x %#04x client %v quic %v", i,
				g.TLSVersion, g.TLSCipherSuite, g.TLSGroup, g.TLSClientHello, g.QUIC,
				w.TLSVersion, w.TLSCipherSuite, w.TLSGroup, w.TLSClientHello, w.QUIC)
		}
	}
	f1 := got.Flows[1]
	t0, t1, t2 := f0.GetTls(), f1.GetTls(), f2.GetTls()
	if t0.GetTlsVersion() != 0x0304 || t0.GetTlsCipherSuite() != 0x1302 || t0.GetTlsGroup() != 0x11ec || t0.GetTlsClientHello() || t0.GetQuic() ||
		t1.GetTlsVersion() != 0xfefd || t1.GetTlsCipherSuite() != 0xffff || t1.GetTlsGroup() != 0 || !t1.GetTlsClientHello() || !t1.GetQuic() {
		t.Errorf("tls on the wire: %v / %v", f0, f1)
	}
	if t2.GetTlsVersion() != 0 || t2.GetTlsCipherSuite() != 0 || t2.GetTlsGroup() != 0 || t2.GetTlsClientHello() || t2.GetQuic() || back[2].HasTLS() {
		t.Errorf("flow without TLS came back with %v", f2)
	}
	// DNS fields: both ways exactly.
	for i := range recs {
		w, g := &recs[i], &back[i]
		if g.DNSID != w.DNSID || g.DNSFlags != w.DNSFlags || g.DNSRcode != w.DNSRcode || g.DNSName != w.DNSName ||
			g.DNSNameTruncated != w.DNSNameTruncated || g.DNSLatency != w.DNSLatency ||
			g.DNSLatencyMax != w.DNSLatencyMax || g.DNSTimeout != w.DNSTimeout || g.HasDNS() != w.HasDNS() {
			t.Errorf("flow %d: dns came back as %+v, want %+v", i, g, w)
		}
	}
	d0, d1, d2 := f0.GetDns(), f1.GetDns(), f2.GetDns()
	if d0.GetDnsId() != 0xbeef || d0.GetDnsFlags() != 0x100 || d0.GetDnsRcode() != 3 || d0.GetDnsName() != `kubernetes.default.svc\.x\255` ||
		d0.GetDnsNameTruncated() || d0.GetDnsLatencyNs() != 1500000 || d0.GetDnsLatencyMaxNs() != 4000000 || d0.GetDnsTimeout() ||
		d1.GetDnsId() != 0xffff || d1.GetDnsFlags() != 0xffff || d1.GetDnsRcode() != 255 || d1.GetDnsName() != "www.exam" ||
		!d1.GetDnsNameTruncated() || d1.GetDnsLatencyNs() != 0 || d1.GetDnsLatencyMaxNs() != 0 || !d1.GetDnsTimeout() {
		t.Errorf("dns on the wire: %v / %v", f0, f1)
	}
	if d2.GetDnsId() != 0 || d2.GetDnsFlags() != 0 || d2.GetDnsRcode() != 0 || d2.GetDnsName() != "" || d2.GetDnsNameTruncated() ||
		d2.GetDnsLatencyNs() != 0 || d2.GetDnsLatencyMaxNs() != 0 || d2.GetDnsTimeout() || back[2].HasDNS() {
		t.Errorf("flow without DNS came back with %v", f2)
	}
}

// Re-encoding a batch no larger than one already seen allocates nothing.
func TestEncodeReusesMessages(t *testing.T) {
	enc := flowpb.NewEncoder(flowpb.Identity{NodeName: "n", AgentIP: netip.MustParseAddr("fd00::9")})
	recs := sampleRecords()
	big := make([]flow.Record, 0, 300)
	for i := 0; i < 100; i++ {
		big = append(big, recs...)
	}
	enc.Encode(big)
	allocs := testing.AllocsPerRun(20, func() { enc.Encode(big) })
	if allocs != 0 {
		t.Fatalf("Encode allocated %.1f times per batch, want 0", allocs)
	}
	msgs := enc.Encode(big[:3])
	if len(msgs) != 3 || len(msgs[0].Interfaces) != 2 || len(msgs[1].Interfaces) != 0 {
		t.Fatalf("reused messages not reset: %d msgs, ifaces %d/%d", len(msgs), len(msgs[0].Interfaces), len(msgs[1].Interfaces))
	}
}

func TestValidateRejects(t *testing.T) {
	good := func() *flowv1.Flow {
		return &flowv1.Flow{SrcAddr: []byte{10, 0, 0, 1}, DstAddr: []byte{10, 0, 0, 2}, SrcPort: 1, DstPort: 2, Proto: 17,
			StartTime: timestamppb.Now(), EndTime: timestamppb.Now()}
	}
	if err := flowpb.Validate(good()); err != nil {
		t.Fatalf("good flow rejected: %v", err)
	}
	for name, mut := range map[string]func(f *flowv1.Flow){
		"5-byte address":    func(f *flowv1.Flow) { f.SrcAddr = []byte{1, 2, 3, 4, 5} },
		"3-byte agent ip":   func(f *flowv1.Flow) { f.AgentIp = []byte{1, 2, 3} },
		"short mac":         func(f *flowv1.Flow) { f.DstMac = []byte{1} },
		"port > 65535":      func(f *flowv1.Flow) { f.DstPort = 70000 },
		"proto > 255":       func(f *flowv1.Flow) { f.Proto = 256 },
		"dscp > 63":         func(f *flowv1.Flow) { f.Dscp = 64 },
		"bad timestamp":     func(f *flowv1.Flow) { f.EndTime = &timestamppb.Timestamp{Nanos: -1} },
		"bad direction":     func(f *flowv1.Flow) { f.Interfaces = []*flowv1.Interface{{Direction: 9}} },
		"null interface":    func(f *flowv1.Flow) { f.Interfaces = []*flowv1.Interface{nil} },
		"7 interfaces":      func(f *flowv1.Flow) { f.Interfaces = make([]*flowv1.Interface, 7) },
		"rtt out of range":  func(f *flowv1.Flow) { f.Rtt = &flowv1.RTT{RttNs: 1 << 63} },
		"5-byte xlat src":   func(f *flowv1.Flow) { f.Xlat = &flowv1.Xlat{XlatSrcAddr: []byte{1, 2, 3, 4, 5}} },
		"1-byte xlat dst":   func(f *flowv1.Flow) { f.Xlat = &flowv1.Xlat{XlatDstAddr: []byte{1}} },
		"xlat port > 65535": func(f *flowv1.Flow) { f.Xlat = &flowv1.Xlat{XlatDstPort: 65536} },
		"xlat src port":     func(f *flowv1.Flow) { f.Xlat = &flowv1.Xlat{XlatSrcPort: 1 << 20} },
		"xlat zone > 65535": func(f *flowv1.Flow) { f.Xlat = &flowv1.Xlat{XlatZoneId: 65536} },
		"tls version":       func(f *flowv1.Flow) { f.Tls = &flowv1.TLS{TlsVersion: 0x10304} },
		"tls cipher suite":  func(f *flowv1.Flow) { f.Tls = &flowv1.TLS{TlsCipherSuite: 65536} },
		"tls group":         func(f *flowv1.Flow) { f.Tls = &flowv1.TLS{TlsGroup: 1 << 31} },
		"dns id":            func(f *flowv1.Flow) { f.Dns = &flowv1.DNS{DnsId: 65536} },
		"dns flags":         func(f *flowv1.Flow) { f.Dns = &flowv1.DNS{DnsFlags: 1 << 20} },
		"dns rcode > 255":   func(f *flowv1.Flow) { f.Dns = &flowv1.DNS{DnsRcode: 256} },
		"dns latency":       func(f *flowv1.Flow) { f.Dns = &flowv1.DNS{DnsLatencyNs: 1 << 63} },
		"dns latency max":   func(f *flowv1.Flow) { f.Dns = &flowv1.DNS{DnsLatencyMaxNs: math.MaxUint64} },
	} {
		f := good()
		mut(f)
		err := flowpb.Validate(f)
		if !errors.Is(err, flowpb.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
		if _, err := flowpb.ToRecords(nil, []*flowv1.Flow{good(), f}); err == nil {
			t.Errorf("%s: ToRecords accepted it", name)
		}
	}
}

package datapath_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/flowlens/flowlens/internal/datapath"
)

// Packet builders for BPF_PROG_TEST_RUN. They write headers by hand so a
// test can also write them wrong.

var (
	macA = []byte{0x02, 0, 0, 0, 0, 0xa}
	macB = []byte{0x02, 0, 0, 0, 0, 0xb}
)

func eth(ethType uint16, vlans ...uint16) []byte {
	b := append(append([]byte{}, macB...), macA...)
	for _, tpid := range vlans {
		b = binary.BigEndian.AppendUint16(b, tpid)
		b = binary.BigEndian.AppendUint16(b, 42) // TCI: VLAN 42
	}
	return binary.BigEndian.AppendUint16(b, ethType)
}

func ipv4(proto uint8, src, dst string, tos uint8, fragOff uint16, payloadLen int) []byte {
	b := make([]byte, 20)
	b[0] = 0x45
	b[1] = tos
	binary.BigEndian.PutUint16(b[2:], uint16(20+payloadLen))
	binary.BigEndian.PutUint16(b[6:], fragOff)
	b[8] = 64
	b[9] = proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	return b
}

func ipv6(next uint8, src, dst string, payloadLen int) []byte {
	b := make([]byte, 40)
	b[0] = 0x60 | 0x0b // version 6, traffic class 0xb? (upper nibble)
	b[1] = 0x80        // traffic class low nibble 8 -> TC 0xb8 (DSCP 46)
	binary.BigEndian.PutUint16(b[4:], uint16(payloadLen))
	b[6] = next
	b[7] = 64
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return b
}

func udp(sport, dport uint16, payload int) []byte {
	b := make([]byte, 8+payload)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+payload))
	return b
}

func tcp(sport, dport uint16, flags uint8, doff uint8) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	b[12] = doff << 4
	b[13] = flags
	return b
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func pad(b []byte) []byte { // BPF_PROG_TEST_RUN wants at least ETH_HLEN bytes
	for len(b) < 14 {
		b = append(b, 0)
	}
	return b
}

func load(t *testing.T, maxFlows uint32) *datapath.Datapath {
	t.Helper()
	dp, err := datapath.Load(datapath.Config{MaxFlows: maxFlows, Sampling: 1})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { dp.Close() })
	return dp
}

// testCookie is the netns cookie the test programs are loaded with.
const testCookie = 0xc0ffee

func runPkt(t *testing.T, dp *datapath.Datapath, pkt []byte, repeat uint32) {
	t.Helper()
	progs, err := dp.ProgramsFor(testCookie)
	if err != nil {
		t.Fatal(err)
	}
	ret, err := progs.Ingress.Run(&ebpf.RunOptions{Data: pkt, Repeat: repeat})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	if int32(ret) != -1 { // TC_ACT_UNSPEC / TCX_NEXT
		t.Fatalf("program returned %d, want -1 (TC_ACT_UNSPEC)", int32(ret))
	}
}

type entry struct {
	k datapath.FlowsFlowKey
	v datapath.FlowsFlowValue
}

// flows returns every entry of both flow maps.
func flows(t *testing.T, dp *datapath.Datapath) []entry {
	t.Helper()
	var out []entry
	for _, m := range dp.Maps.Flows {
		var e entry
		it := m.Iterate()
		for it.Next(&e.k, &e.v) {
			out = append(out, e)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func counters(t *testing.T, dp *datapath.Datapath) [datapath.FlowsCounterCNT_MAX]uint64 {
	t.Helper()
	c, err := dp.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mapped(s string) [16]byte { return netip.MustParseAddr(s).As16() }
func v4mapped(s string) [16]byte {
	return netip.AddrFrom4(netip.MustParseAddr(s).As4()).As16()
}

func TestParseValidPackets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pkt     []byte
		key     datapath.FlowsFlowKey
		ethType uint16
		dscp    uint8
		flags   uint16
	}{
		{
			name:    "ipv4 udp",
			pkt:     cat(eth(0x0800), ipv4(17, "10.0.0.1", "10.0.0.2", 0xb8, 0, 8+100), udp(1234, 53, 100)),
			key:     datapath.FlowsFlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), SrcPort: 1234, DstPort: 53, Proto: 17},
			ethType: 0x0800, dscp: 46,
		},
		{
			name:    "802.1Q ipv4 tcp syn-ack",
			pkt:     cat(eth(0x0800, 0x8100), ipv4(6, "10.0.0.1", "10.0.0.2", 0, 0, 20), tcp(80, 40000, 0x12, 5)),
			key:     datapath.FlowsFlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), SrcPort: 80, DstPort: 40000, Proto: 6},
			ethType: 0x0800, flags: 0x12 | 0x100,
		},
		{
			name:    "QinQ ipv4 tcp rst-ack",
			pkt:     cat(eth(0x0800, 0x88a8, 0x8100), ipv4(6, "10.0.0.1", "10.0.0.2", 0, 0, 20), tcp(80, 40000, 0x14, 5)),
			key:     datapath.FlowsFlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), SrcPort: 80, DstPort: 40000, Proto: 6},
			ethType: 0x0800, flags: 0x14 | 0x400,
		},
		{
			name:    "ipv4 icmp echo",
			pkt:     cat(eth(0x0800), ipv4(1, "10.0.0.1", "10.0.0.2", 0, 0, 8), []byte{8, 0, 0, 0, 0, 1, 0, 1}),
			key:     datapath.FlowsFlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), Proto: 1, IcmpType: 8},
			ethType: 0x0800,
		},
		{
			name:    "ipv4 non-first fragment has no ports",
			pkt:     cat(eth(0x0800), ipv4(17, "10.0.0.1", "10.0.0.2", 0, 185, 8), udp(1, 2, 0)),
			key:     datapath.FlowsFlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), Proto: 17},
			ethType: 0x0800,
		},
		{
			name:    "ipv4 sctp",
			pkt:     cat(eth(0x0800), ipv4(132, "10.0.0.1", "10.0.0.2", 0, 0, 12), udp(3868, 3869, 4)),
			key:     datapath.FlowsFlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), SrcPort: 3868, DstPort: 3869, Proto: 132},
			ethType: 0x0800,
		},
		{
			name:    "ipv4 gre: 3-tuple",
			pkt:     cat(eth(0x0800), ipv4(47, "10.0.0.1", "10.0.0.2", 0, 0, 4), []byte{0, 0, 8, 0}),
			key:     datapath.FlowsFlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), Proto: 47},
			ethType: 0x0800,
		},
		{
			name:    "ipv6 udp",
			pkt:     cat(eth(0x86dd), ipv6(17, "fd00::1", "fd00::2", 8), udp(5000, 6000, 0)),
			key:     datapath.FlowsFlowKey{SrcIp: mapped("fd00::1"), DstIp: mapped("fd00::2"), SrcPort: 5000, DstPort: 6000, Proto: 17},
			ethType: 0x86dd, dscp: 46,
		},
		{
			name: "ipv6 hop-by-hop + dstopts + first fragment + tcp",
			pkt: cat(eth(0x86dd), ipv6(0, "fd00::1", "fd00::2", 8+16+8+20),
				[]byte{60, 0, 1, 4, 0, 0, 0, 0},                         // hop-by-hop, 8 bytes, next: dstopts
				[]byte{44, 1, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, // dstopts, 16 bytes, next: fragment
				[]byte{6, 0, 0, 1, 0, 0, 0, 7},                          // fragment offset 0, M=1, next: tcp
				tcp(443, 50000, 0x10, 5)),
			key:     datapath.FlowsFlowKey{SrcIp: mapped("fd00::1"), DstIp: mapped("fd00::2"), SrcPort: 443, DstPort: 50000, Proto: 6},
			ethType: 0x86dd, dscp: 46, flags: 0x10,
		},
		{
			name:    "ipv6 non-first fragment has no ports",
			pkt:     cat(eth(0x86dd), ipv6(44, "fd00::1", "fd00::2", 16), []byte{17, 0, 0x01, 0x00, 0, 0, 0, 7}, udp(1, 2, 0)),
			key:     datapath.FlowsFlowKey{SrcIp: mapped("fd00::1"), DstIp: mapped("fd00::2"), Proto: 17},
			ethType: 0x86dd, dscp: 46,
		},
		{
			name:    "icmpv6 echo",
			pkt:     cat(eth(0x86dd), ipv6(58, "fd00::1", "fd00::2", 8), []byte{128, 0, 0, 0, 0, 1, 0, 1}),
			key:     datapath.FlowsFlowKey{SrcIp: mapped("fd00::1"), DstIp: mapped("fd00::2"), Proto: 58, IcmpType: 128},
			ethType: 0x86dd, dscp: 46,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dp := load(t, 16)
			const n = 7
			runPkt(t, dp, tc.pkt, n)
			got := flows(t, dp)
			if len(got) != 1 {
				t.Fatalf("%d flows, want 1: %+v", len(got), got)
			}
			e := got[0]
			if e.k != tc.key {
				t.Errorf("key\n got %+v\nwant %+v", e.k, tc.key)
			}
			if e.v.Packets != n || e.v.Bytes != n*uint64(len(tc.pkt)) {
				t.Errorf("packets=%d bytes=%d, want %d and %d", e.v.Packets, e.v.Bytes, n, n*len(tc.pkt))
			}
			if e.v.EthType != tc.ethType || e.v.Dscp != tc.dscp || e.v.TcpFlags != tc.flags {
				t.Errorf("eth_type=%#x dscp=%d tcp_flags=%#x, want %#x %d %#x", e.v.EthType, e.v.Dscp, e.v.TcpFlags, tc.ethType, tc.dscp, tc.flags)
			}
			if string(e.v.SrcMac[:]) != string(macA) || string(e.v.DstMac[:]) != string(macB) {
				t.Errorf("macs %x -> %x", e.v.SrcMac, e.v.DstMac)
			}
			if e.v.N_ifaces != 1 || e.v.Ifaces[0].Dir != 1 || e.v.Ifaces[0].Ifindex != 1 || e.v.Ifaces[0].Netns != testCookie {
				t.Errorf("interfaces: n=%d first=%+v", e.v.N_ifaces, e.v.Ifaces[0])
			}
			if c := counters(t, dp); c[datapath.FlowsCounterCNT_MALFORMED] != 0 || c[datapath.FlowsCounterCNT_NON_IP] != 0 || c[datapath.FlowsCounterCNT_NEW_FLOWS] != 1 {
				t.Errorf("counters %v", c)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pkt     []byte
		counter datapath.FlowsCounter
	}{
		{"arp is not ip", cat(eth(0x0806), make([]byte, 28)), datapath.FlowsCounterCNT_NON_IP},
		{"vlan-tagged arp is not ip", cat(eth(0x0806, 0x8100), make([]byte, 28)), datapath.FlowsCounterCNT_NON_IP},
		{"three vlan tags", cat(eth(0x0800, 0x8100, 0x8100, 0x8100), ipv4(17, "10.0.0.1", "10.0.0.2", 0, 0, 8), udp(1, 2, 0)), datapath.FlowsCounterCNT_NON_IP},
		{"truncated vlan tag", pad(cat(append(append([]byte{}, macB...), macA...), []byte{0x81, 0x00, 0, 1})), datapath.FlowsCounterCNT_MALFORMED},
		// The kernel's test run refuses an untagged IP frame shorter than an IP
		// header, so these truncations hide behind a VLAN tag.
		{"truncated ipv4 header", cat(eth(0x0800, 0x8100), ipv4(17, "10.0.0.1", "10.0.0.2", 0, 0, 8)[:12]), datapath.FlowsCounterCNT_MALFORMED},
		{"ipv4 ihl < 5", func() []byte {
			ip := ipv4(17, "10.0.0.1", "10.0.0.2", 0, 0, 8)
			ip[0] = 0x44
			return cat(eth(0x0800), ip, udp(1, 2, 0))
		}(), datapath.FlowsCounterCNT_MALFORMED},
		{"ipv4 ihl past the end", func() []byte {
			ip := ipv4(17, "10.0.0.1", "10.0.0.2", 0, 0, 8)
			ip[0] = 0x4f
			return cat(eth(0x0800), ip, udp(1, 2, 0))
		}(), datapath.FlowsCounterCNT_MALFORMED},
		{"wrong ip version", func() []byte {
			ip := ipv4(17, "10.0.0.1", "10.0.0.2", 0, 0, 8)
			ip[0] = 0x65
			return cat(eth(0x0800), ip, udp(1, 2, 0))
		}(), datapath.FlowsCounterCNT_MALFORMED},
		{"truncated udp", cat(eth(0x0800), ipv4(17, "10.0.0.1", "10.0.0.2", 0, 0, 8), udp(1, 2, 0)[:5]), datapath.FlowsCounterCNT_MALFORMED},
		{"truncated tcp", cat(eth(0x0800), ipv4(6, "10.0.0.1", "10.0.0.2", 0, 0, 20), tcp(1, 2, 2, 5)[:12]), datapath.FlowsCounterCNT_MALFORMED},
		{"tcp doff < 5", cat(eth(0x0800), ipv4(6, "10.0.0.1", "10.0.0.2", 0, 0, 20), tcp(1, 2, 2, 3)), datapath.FlowsCounterCNT_MALFORMED},
		{"truncated icmp", cat(eth(0x0800), ipv4(1, "10.0.0.1", "10.0.0.2", 0, 0, 8), []byte{8, 0}), datapath.FlowsCounterCNT_MALFORMED},
		{"truncated ipv6 header", cat(eth(0x86dd, 0x8100), ipv6(17, "fd00::1", "fd00::2", 8)[:30]), datapath.FlowsCounterCNT_MALFORMED},
		{"truncated ipv6 extension header", cat(eth(0x86dd), ipv6(0, "fd00::1", "fd00::2", 4), []byte{17, 0, 0, 0}), datapath.FlowsCounterCNT_MALFORMED},
		{"ipv6 extension header past the end", cat(eth(0x86dd), ipv6(0, "fd00::1", "fd00::2", 8), []byte{17, 9, 0, 0, 0, 0, 0, 0}), datapath.FlowsCounterCNT_MALFORMED},
		{"too many ipv6 extension headers", cat(eth(0x86dd), ipv6(60, "fd00::1", "fd00::2", 56),
			[]byte{60, 0, 0, 0, 0, 0, 0, 0}, []byte{60, 0, 0, 0, 0, 0, 0, 0}, []byte{60, 0, 0, 0, 0, 0, 0, 0},
			[]byte{60, 0, 0, 0, 0, 0, 0, 0}, []byte{60, 0, 0, 0, 0, 0, 0, 0}, []byte{60, 0, 0, 0, 0, 0, 0, 0},
			udp(1, 2, 0)), datapath.FlowsCounterCNT_MALFORMED},
		{"ipv6 header with version 4", func() []byte {
			ip := ipv6(17, "fd00::1", "fd00::2", 8)
			ip[0] = 0x40
			return cat(eth(0x86dd), ip, udp(1, 2, 0))
		}(), datapath.FlowsCounterCNT_MALFORMED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dp := load(t, 16)
			runPkt(t, dp, tc.pkt, 3)
			if got := flows(t, dp); len(got) != 0 {
				t.Fatalf("bogus flows: %+v", got)
			}
			c := counters(t, dp)
			for i, v := range c {
				want := uint64(0)
				if datapath.FlowsCounter(i) == tc.counter {
					want = 3
				}
				if v != want {
					t.Errorf("counter %d = %d, want %d (all: %v)", i, v, want, c)
				}
			}
		})
	}
}

// A full flow map sends packets through the overflow ring buffer, one record
// each, with the same key the map would have used.
func TestOverflowRingBuffer(t *testing.T) {
	dp := load(t, 2)
	rd, err := ringbuf.NewReader(dp.Maps.Overflow)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for port := uint16(1); port <= 5; port++ {
		runPkt(t, dp, cat(eth(0x0800), ipv4(17, "10.0.0.1", "10.0.0.2", 0, 0, 8), udp(port, 9, 0)), 2)
	}
	if n := len(flows(t, dp)); n != 2 {
		t.Fatalf("%d flows in the map, want 2", n)
	}
	c := counters(t, dp)
	if c[datapath.FlowsCounterCNT_OVERFLOW_RECORDS] != 6 || c[datapath.FlowsCounterCNT_OVERFLOW_LOST] != 0 {
		t.Fatalf("overflow counters %v, want 6 records, 0 lost", c)
	}
	ports := map[uint16]int{}
	for i := 0; i < 6; i++ {
		rec, err := rd.Read()
		if err != nil {
			t.Fatal(err)
		}
		var r datapath.FlowsOverflowRec
		if _, err := binary.Decode(rec.RawSample, binary.NativeEndian, &r); err != nil {
			t.Fatal(err)
		}
		if r.Bytes != 14+20+8 || r.Key.DstPort != 9 || r.Key.Proto != 17 || r.Iface.Dir != 1 {
			t.Fatalf("record %+v", r)
		}
		ports[r.Key.SrcPort]++
	}
	if ports[3] != 2 || ports[4] != 2 || ports[5] != 2 {
		t.Fatalf("overflow records by source port: %v", ports)
	}
}

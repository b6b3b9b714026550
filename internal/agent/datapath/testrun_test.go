package datapath_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit/bpfrun"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// Frames come from internal/testkit/packet, which writes headers by hand so
// a test can also write them wrong.

func load(t *testing.T, maxFlows uint32) *datapath.Datapath {
	t.Helper()
	dp, err := datapath.Load(datapath.Config{MaxFlows: maxFlows, Sampling: 1})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { dp.Close() })
	return dp
}

// testCookie is the netns cookie the test programs are loaded with in the
// fallback (one set per namespace).
const testCookie = 0xc0ffee

// runNetns is the namespace cookie a BPF_PROG_TEST_RUN packet of dp's
// programs is recorded under. BPF_PROG_TEST_RUN hands the program the
// loopback device of the caller's namespace: the shared programs, which read
// the device's namespace, record that one's cookie (SO_NETNS_COOKIE, which
// this compares with); the fallback's, the cookie they were loaded with.
func runNetns(t *testing.T, dp *datapath.Datapath) uint64 {
	t.Helper()
	if !dp.SharedPrograms() {
		return testCookie
	}
	c, err := ifaces.NetnsCookie("")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func runPkt(t *testing.T, dp *datapath.Datapath, pkt []byte, repeat uint32) {
	t.Helper()
	progs, err := dp.ProgramsFor(testCookie)
	if err != nil {
		t.Fatal(err)
	}
	ret, err := bpfrun.Exactly(progs.Ingress, pkt, int(repeat))
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	if int32(ret) != -1 { // TC_ACT_UNSPEC / TCX_NEXT
		t.Fatalf("program returned %d, want -1 (TC_ACT_UNSPEC)", int32(ret))
	}
}

type entry struct {
	k datapath.FlowKey
	v datapath.FlowValue
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

func counters(t *testing.T, dp *datapath.Datapath) [datapath.NumCounters]uint64 {
	t.Helper()
	c, err := dp.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tc46 is the Traffic Class of the IPv6 test frames: DSCP 46 (EF).
var tc46 = packet.TOS(0xb8)

// dstopts is a bare 8-byte Destination Options header, next: dstopts.
var dstopts = packet.ExtHeader(packet.ProtoDstOpts, 0)

func mapped(s string) [16]byte { return netip.MustParseAddr(s).As16() }
func v4mapped(s string) [16]byte {
	return netip.AddrFrom4(netip.MustParseAddr(s).As4()).As16()
}

func TestParseValidPackets(t *testing.T) {
	needBPF(t)
	for _, tc := range []struct {
		name    string
		pkt     []byte
		key     datapath.FlowKey
		ethType uint16
		dscp    uint8
		flags   uint16
	}{
		{
			name:    "ipv4 udp",
			pkt:     packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(packet.ProtoUDP, "10.0.0.1", "10.0.0.2", 8+100, packet.TOS(0xb8)), packet.UDP(1234, 53, 100)),
			key:     datapath.FlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), SrcPort: 1234, DstPort: 53, Proto: 17},
			ethType: 0x0800, dscp: 46,
		},
		{
			name:    "802.1Q ipv4 tcp syn-ack",
			pkt:     packet.Cat(packet.Eth(packet.EtherTypeIPv4, packet.Dot1Q(42)), packet.IPv4(packet.ProtoTCP, "10.0.0.1", "10.0.0.2", 20), packet.TCP(80, 40000, packet.SYN|packet.ACK)),
			key:     datapath.FlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), SrcPort: 80, DstPort: 40000, Proto: 6},
			ethType: 0x0800, flags: 0x12 | 0x100,
		},
		{
			name:    "QinQ ipv4 tcp rst-ack",
			pkt:     packet.Cat(packet.Eth(packet.EtherTypeIPv4, packet.QinQ(42, 42)), packet.IPv4(packet.ProtoTCP, "10.0.0.1", "10.0.0.2", 20), packet.TCP(80, 40000, packet.RST|packet.ACK)),
			key:     datapath.FlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), SrcPort: 80, DstPort: 40000, Proto: 6},
			ethType: 0x0800, flags: 0x14 | 0x400,
		},
		{
			name:    "ipv4 icmp echo",
			pkt:     packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(packet.ProtoICMP, "10.0.0.1", "10.0.0.2", 8), packet.ICMP(packet.ICMPEchoRequest, 0, 1, 1)),
			key:     datapath.FlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), Proto: 1, IcmpType: 8},
			ethType: 0x0800,
		},
		{
			name:    "ipv4 non-first fragment has no ports",
			pkt:     packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(packet.ProtoUDP, "10.0.0.1", "10.0.0.2", 8, packet.Frag(0, 185)), packet.UDP(1, 2, 0)),
			key:     datapath.FlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), Proto: 17},
			ethType: 0x0800,
		},
		{
			name:    "ipv4 sctp",
			pkt:     packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(packet.ProtoSCTP, "10.0.0.1", "10.0.0.2", 12), packet.UDP(3868, 3869, 4)),
			key:     datapath.FlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), SrcPort: 3868, DstPort: 3869, Proto: 132},
			ethType: 0x0800,
		},
		{
			name:    "ipv4 gre: 3-tuple",
			pkt:     packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(packet.ProtoGRE, "10.0.0.1", "10.0.0.2", 4), packet.GRE(packet.EtherTypeIPv4)),
			key:     datapath.FlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), Proto: 47},
			ethType: 0x0800,
		},
		{
			name:    "ipv6 udp",
			pkt:     packet.Cat(packet.Eth(packet.EtherTypeIPv6), packet.IPv6(packet.ProtoUDP, "fd00::1", "fd00::2", 8, tc46), packet.UDP(5000, 6000, 0)),
			key:     datapath.FlowKey{SrcIp: mapped("fd00::1"), DstIp: mapped("fd00::2"), SrcPort: 5000, DstPort: 6000, Proto: 17},
			ethType: 0x86dd, dscp: 46,
		},
		{
			name: "ipv6 hop-by-hop + dstopts + first fragment + tcp",
			pkt: packet.Cat(packet.Eth(packet.EtherTypeIPv6), packet.IPv6(packet.ProtoHopByHop, "fd00::1", "fd00::2", 8+16+8+20, tc46),
				packet.Options(packet.ProtoDstOpts, 0),        // hop-by-hop, 8 bytes, next: dstopts
				packet.Options(packet.ProtoFragment, 1),       // dstopts, 16 bytes, next: fragment
				packet.Fragment6(packet.ProtoTCP, 0, true, 7), // fragment offset 0, M=1, next: tcp
				packet.TCP(443, 50000, packet.ACK)),
			key:     datapath.FlowKey{SrcIp: mapped("fd00::1"), DstIp: mapped("fd00::2"), SrcPort: 443, DstPort: 50000, Proto: 6},
			ethType: 0x86dd, dscp: 46, flags: 0x10,
		},
		{
			name:    "ipv6 non-first fragment has no ports",
			pkt:     packet.Cat(packet.Eth(packet.EtherTypeIPv6), packet.IPv6(packet.ProtoFragment, "fd00::1", "fd00::2", 16, tc46), packet.Fragment6(packet.ProtoUDP, 32, false, 7), packet.UDP(1, 2, 0)),
			key:     datapath.FlowKey{SrcIp: mapped("fd00::1"), DstIp: mapped("fd00::2"), Proto: 17},
			ethType: 0x86dd, dscp: 46,
		},
		{
			name:    "icmpv6 echo",
			pkt:     packet.Cat(packet.Eth(packet.EtherTypeIPv6), packet.IPv6(packet.ProtoICMPv6, "fd00::1", "fd00::2", 8, tc46), packet.ICMPv6(packet.ICMPv6EchoRequest, 0, 1, 1)),
			key:     datapath.FlowKey{SrcIp: mapped("fd00::1"), DstIp: mapped("fd00::2"), Proto: 58, IcmpType: 128},
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
			tc.key.Zone = loZone(t, dp) // test-run packets are on loopback
			if e.k != tc.key {
				t.Errorf("key\n got %+v\nwant %+v", e.k, tc.key)
			}
			if e.v.Packets != n || e.v.Bytes != n*uint64(len(tc.pkt)) {
				t.Errorf("packets=%d bytes=%d, want %d and %d", e.v.Packets, e.v.Bytes, n, n*len(tc.pkt))
			}
			if e.v.EthType != tc.ethType || e.v.Dscp != tc.dscp || e.v.TcpFlags != tc.flags {
				t.Errorf("eth_type=%#x dscp=%d tcp_flags=%#x, want %#x %d %#x", e.v.EthType, e.v.Dscp, e.v.TcpFlags, tc.ethType, tc.dscp, tc.flags)
			}
			if string(e.v.SrcMac[:]) != string(packet.SrcMAC[:]) || string(e.v.DstMac[:]) != string(packet.DstMAC[:]) {
				t.Errorf("macs %x -> %x", e.v.SrcMac, e.v.DstMac)
			}
			if e.v.N_ifaces != 1 || e.v.Ifaces[0].Dir != 1 || e.v.Ifaces[0].Ifindex != 1 || e.v.Ifaces[0].Netns != runNetns(t, dp) {
				t.Errorf("interfaces: n=%d first=%+v", e.v.N_ifaces, e.v.Ifaces[0])
			}
			if c := counters(t, dp); c[datapath.CounterMalformed] != 0 || c[datapath.CounterNonIP] != 0 || c[datapath.CounterNewFlows] != 1 {
				t.Errorf("counters %v", c)
			}
		})
	}
}

// Frames whose addresses cannot be read end in a counter by reason, never in
// a flow (those whose later headers cannot be read are flows: unread_test.go).
func TestParseRejects(t *testing.T) {
	needBPF(t)
	for _, tc := range []struct {
		name    string
		pkt     []byte
		counter datapath.Counter
	}{
		{"arp is not ip", packet.Cat(packet.Eth(packet.EtherTypeARP), packet.Payload(28)), datapath.CounterNonIP},
		{"vlan-tagged arp is not ip", packet.Cat(packet.Eth(packet.EtherTypeARP, packet.Dot1Q(42)), packet.Payload(28)), datapath.CounterNonIP},
		{"three vlan tags", packet.Cat(packet.Eth(packet.EtherTypeIPv4, packet.Dot1Q(42), packet.Dot1Q(42), packet.Dot1Q(42)), packet.IPv4(packet.ProtoUDP, "10.0.0.1", "10.0.0.2", 8), packet.UDP(1, 2, 0)), datapath.CounterNonIP},
		{"truncated vlan tag", packet.Pad(packet.Eth(packet.EtherTypeIPv4, packet.Dot1Q(1))[:16]), datapath.CounterTruncated},
		// The kernel's test run refuses an untagged IP frame shorter than an IP
		// header, so these truncations hide behind a VLAN tag.
		{"truncated ipv4 header", packet.Cat(packet.Eth(packet.EtherTypeIPv4, packet.Dot1Q(42)), packet.IPv4(packet.ProtoUDP, "10.0.0.1", "10.0.0.2", 8)[:12]), datapath.CounterTruncated},
		{"ipv4 ihl < 5", func() []byte {
			ip := packet.IPv4(packet.ProtoUDP, "10.0.0.1", "10.0.0.2", 8)
			ip[0] = 0x44
			return packet.Cat(packet.Eth(packet.EtherTypeIPv4), ip, packet.UDP(1, 2, 0))
		}(), datapath.CounterMalformed},
		{"wrong ip version", func() []byte {
			ip := packet.IPv4(packet.ProtoUDP, "10.0.0.1", "10.0.0.2", 8)
			ip[0] = 0x65
			return packet.Cat(packet.Eth(packet.EtherTypeIPv4), ip, packet.UDP(1, 2, 0))
		}(), datapath.CounterMalformed},
		{"truncated ipv6 header", packet.Cat(packet.Eth(packet.EtherTypeIPv6, packet.Dot1Q(42)), packet.IPv6(packet.ProtoUDP, "fd00::1", "fd00::2", 8, tc46)[:30]), datapath.CounterTruncated},
		{"ipv6 header with version 4", func() []byte {
			ip := packet.IPv6(packet.ProtoUDP, "fd00::1", "fd00::2", 8, tc46)
			ip[0] = 0x40
			return packet.Cat(packet.Eth(packet.EtherTypeIPv6), ip, packet.UDP(1, 2, 0))
		}(), datapath.CounterMalformed},
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
				if datapath.Counter(i) == tc.counter {
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
	needBPF(t)
	dp := load(t, 2)
	rd, err := ringbuf.NewReader(dp.Maps.Overflow)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for port := uint16(1); port <= 5; port++ {
		runPkt(t, dp, packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(packet.ProtoUDP, "10.0.0.1", "10.0.0.2", 8), packet.UDP(port, 9, 0)), 2)
	}
	if n := len(flows(t, dp)); n != 2 {
		t.Fatalf("%d flows in the map, want 2", n)
	}
	c := counters(t, dp)
	if c[datapath.CounterOverflowRecords] != 6 || c[datapath.CounterOverflowLost] != 0 {
		t.Fatalf("overflow counters %v, want 6 records, 0 lost", c)
	}
	// The programs submit without waking the reader (bpf/full.h): read
	// what is there.
	rd.SetDeadline(time.Now())
	ports := map[uint16]int{}
	for i := 0; i < 6; i++ {
		rec, err := rd.Read()
		if err != nil {
			t.Fatal(err)
		}
		var r datapath.OverflowRec
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

// TCP flags accumulate on the fast path (an atomic OR into the 8-byte word
// they share with eth_type and dscp, bpf/flows.h): each new flag is added,
// the SYN-ACK/FIN-ACK markers too, and the word's other fields stay intact.
func TestTCPFlagsAccumulate(t *testing.T) {
	needBPF(t)
	dp := load(t, 16)
	frame := func(flags uint8) []byte {
		return packet.Cat(packet.Eth(packet.EtherTypeIPv4),
			packet.IPv4(packet.ProtoTCP, "10.0.0.1", "10.0.0.2", 20, packet.TOS(46<<2)),
			packet.TCP(40000, 443, flags))
	}
	want := uint16(0)
	for _, f := range []struct {
		flags uint8
		adds  uint16
	}{
		{packet.SYN, 0x02},
		{packet.ACK, 0x10},
		{packet.ACK | packet.PSH, 0x08},
		{packet.ACK, 0},
		{packet.FIN | packet.ACK, 0x01 | datapath.TCPFinAck},
	} {
		runPkt(t, dp, frame(f.flags), 2)
		want |= f.adds
		got := flows(t, dp)
		if len(got) != 1 {
			t.Fatalf("%d flows, want 1", len(got))
		}
		v := got[0].v
		if v.TcpFlags != want || v.EthType != 0x0800 || v.Dscp != 46 {
			t.Errorf("after flags %#x: tcp_flags=%#x eth_type=%#x dscp=%d, want %#x 0x800 46", f.flags, v.TcpFlags, v.EthType, v.Dscp, want)
		}
	}
}

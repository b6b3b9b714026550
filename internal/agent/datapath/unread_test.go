package datapath_test

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// Every packet the parser cannot read to the end ends in a flow or in a
// named counter, never nowhere (bpf/parse.h lists the exits;
// docs/design/counting.md, "Packets the parser cannot read"): one of each
// kind, each sent a different number of times through one datapath, and
// the flows' packets plus the counters that end a packet add up to the
// packets sent, exactly; each kind is where its exit says, with its flag.
func TestUnreadablePacketsAreCounted(t *testing.T) {
	needBPF(t)
	eth4, eth6 := packet.Eth(packet.EtherTypeIPv4), packet.Eth(packet.EtherTypeIPv6)
	l4, ext := datapath.FlowFlagL4Unread, datapath.FlowFlagExtUnread
	v4key := func(src string, proto uint8) datapath.FlowKey {
		return datapath.FlowKey{SrcIp: v4mapped(src), DstIp: v4mapped("10.9.0.1"), Proto: proto}
	}
	v6key := func(src string, proto uint8) datapath.FlowKey {
		return datapath.FlowKey{SrcIp: mapped(src), DstIp: mapped("fd00::9"), Proto: proto}
	}
	ihl := func(src string, b byte) []byte {
		ip := packet.IPv4(packet.ProtoUDP, src, "10.9.0.1", 8)
		ip[0] = b
		return ip
	}
	type kind struct {
		name    string
		frames  [][]byte // sent in this order, each `times` times
		key     datapath.FlowKey
		flags   uint8
		counter datapath.Counter // when not a flow (key zero)
	}
	const noCounter = datapath.Counter(255)
	kinds := []kind{
		{"valid udp (control)", [][]byte{packet.Cat(eth4, packet.IPv4(packet.ProtoUDP, "10.1.0.1", "10.9.0.1", 8), packet.UDP(1, 2, 0))},
			datapath.FlowKey{SrcIp: v4mapped("10.1.0.1"), DstIp: v4mapped("10.9.0.1"), SrcPort: 1, DstPort: 2, Proto: packet.ProtoUDP}, 0, noCounter},
		{"ipv4 options past the packet", [][]byte{packet.Cat(eth4, ihl("10.1.0.2", 0x4f), packet.UDP(1, 2, 0))},
			v4key("10.1.0.2", packet.ProtoUDP), ext, noCounter},
		{"truncated udp", [][]byte{packet.Cat(eth4, packet.IPv4(packet.ProtoUDP, "10.1.0.3", "10.9.0.1", 8), packet.UDP(1, 2, 0)[:5])},
			v4key("10.1.0.3", packet.ProtoUDP), l4, noCounter},
		{"truncated tcp", [][]byte{packet.Cat(eth4, packet.IPv4(packet.ProtoTCP, "10.1.0.4", "10.9.0.1", 20), packet.TCP(1, 2, packet.SYN)[:12])},
			v4key("10.1.0.4", packet.ProtoTCP), l4, noCounter},
		{"tcp data offset < 5", [][]byte{packet.Cat(eth4, packet.IPv4(packet.ProtoTCP, "10.1.0.5", "10.9.0.1", 20), packet.TCP(1, 2, packet.SYN, packet.DataOffset(3)))},
			v4key("10.1.0.5", packet.ProtoTCP), l4, noCounter},
		{"truncated icmp", [][]byte{packet.Cat(eth4, packet.IPv4(packet.ProtoICMP, "10.1.0.6", "10.9.0.1", 8), packet.ICMP(packet.ICMPEchoRequest, 0, 0, 0)[:2])},
			v4key("10.1.0.6", packet.ProtoICMP), l4, noCounter},
		// RFC 1858's tiny fragment: 8 bytes of TCP header in the first
		// fragment, the rest (flags, offset) in the second, which follows its
		// first into the flow (frags remembers ports 0 for the datagram).
		{"tiny first ipv4 fragment and its second", [][]byte{
			packet.Cat(eth4, packet.IPv4(packet.ProtoTCP, "10.1.0.7", "10.9.0.1", 8, packet.Frag(packet.MF, 0), packet.ID(7)), packet.TCP(1, 2, packet.SYN)[:8]),
			packet.Cat(eth4, packet.IPv4(packet.ProtoTCP, "10.1.0.7", "10.9.0.1", 12, packet.Frag(0, 1), packet.ID(7)), packet.TCP(1, 2, packet.SYN)[8:]),
		}, v4key("10.1.0.7", packet.ProtoTCP), l4, noCounter},
		{"truncated ipv6 extension header", [][]byte{packet.Cat(eth6, packet.IPv6(packet.ProtoHopByHop, "fd00::1:1", "fd00::9", 4), packet.ExtHeader(packet.ProtoUDP, 0)[:4])},
			v6key("fd00::1:1", packet.ProtoHopByHop), ext, noCounter},
		{"ipv6 extension header longer than the packet", [][]byte{packet.Cat(eth6, packet.IPv6(packet.ProtoHopByHop, "fd00::1:2", "fd00::9", 16), packet.ExtHeader(packet.ProtoUDP, 9)[:8], packet.UDP(1, 2, 0))},
			v6key("fd00::1:2", packet.ProtoUDP), l4, noCounter},
		{"seven ipv6 extension headers", [][]byte{packet.Cat(eth6, packet.IPv6(packet.ProtoDstOpts, "fd00::1:3", "fd00::9", 64),
			dstopts, dstopts, dstopts, dstopts, dstopts, dstopts, packet.ExtHeader(packet.ProtoUDP, 0), packet.UDP(1, 2, 0))},
			v6key("fd00::1:3", packet.ProtoDstOpts), ext, noCounter},
		{"tiny first ipv6 fragment", [][]byte{packet.Cat(eth6, packet.IPv6(packet.ProtoFragment, "fd00::1:4", "fd00::9", 12), packet.Fragment6(packet.ProtoUDP, 0, true, 9), packet.UDP(1, 2, 0)[:4])},
			v6key("fd00::1:4", packet.ProtoUDP), l4, noCounter},
		// No addresses: a counter by reason.
		{"truncated vlan tag", [][]byte{packet.Pad(packet.Eth(packet.EtherTypeIPv4, packet.Dot1Q(1))[:16])}, datapath.FlowKey{}, 0, datapath.CounterTruncated},
		{"truncated ipv4 header", [][]byte{packet.Cat(packet.Eth(packet.EtherTypeIPv4, packet.Dot1Q(42)), packet.IPv4(packet.ProtoUDP, "10.1.1.1", "10.9.0.1", 8)[:12])}, datapath.FlowKey{}, 0, datapath.CounterTruncated},
		{"truncated ipv6 header", [][]byte{packet.Cat(packet.Eth(packet.EtherTypeIPv6, packet.Dot1Q(42)), packet.IPv6(packet.ProtoUDP, "fd00::2:1", "fd00::9", 8)[:30])}, datapath.FlowKey{}, 0, datapath.CounterTruncated},
		{"ipv4 ihl < 5", [][]byte{packet.Cat(eth4, ihl("10.1.1.2", 0x44), packet.UDP(1, 2, 0))}, datapath.FlowKey{}, 0, datapath.CounterMalformed},
		{"ip version not the ether type's", [][]byte{packet.Cat(eth4, ihl("10.1.1.3", 0x65), packet.UDP(1, 2, 0))}, datapath.FlowKey{}, 0, datapath.CounterMalformed},
		{"not ip", [][]byte{packet.Cat(packet.Eth(packet.EtherTypeARP), packet.Payload(28))}, datapath.FlowKey{}, 0, datapath.CounterNonIP},
	}
	dp := load(t, 64)
	zone := loZone(t, dp) // test-run packets are on loopback
	for i := range kinds {
		if kinds[i].counter == noCounter {
			kinds[i].key.Zone = zone
		}
	}
	var sent uint64
	wantFlow := map[datapath.FlowKey]uint64{}
	wantCounter := map[datapath.Counter]uint64{}
	for i, k := range kinds {
		times := uint32(i + 1)
		for _, f := range k.frames {
			runPkt(t, dp, f, times)
			sent += uint64(times)
		}
		n := uint64(times) * uint64(len(k.frames))
		if k.counter == noCounter {
			wantFlow[k.key] += n
		} else {
			wantCounter[k.counter] += n
		}
	}

	got := flows(t, dp)
	var inFlows uint64
	seen := map[datapath.FlowKey]bool{}
	for _, e := range got {
		inFlows += e.v.Packets
		seen[e.k] = true
	}
	c := counters(t, dp)
	inCounters := c[datapath.CounterTruncated] + c[datapath.CounterMalformed] + c[datapath.CounterNonIP]
	t.Logf("sent %d: %d in %d flows, %d in counters (truncated %d, invalid %d, non-ip %d)", sent, inFlows, len(got),
		inCounters, c[datapath.CounterTruncated], c[datapath.CounterMalformed], c[datapath.CounterNonIP])
	if inFlows+inCounters != sent {
		t.Errorf("flows %d + counters %d = %d, want the %d sent", inFlows, inCounters, inFlows+inCounters, sent)
	}
	for _, k := range kinds {
		if k.counter != noCounter {
			continue
		}
		var e *entry
		for i := range got {
			if got[i].k == k.key {
				e = &got[i]
			}
		}
		if e == nil {
			t.Errorf("%s: no flow %+v", k.name, k.key)
			continue
		}
		if e.v.Packets != wantFlow[k.key] || e.v.Flags != k.flags {
			t.Errorf("%s: %d packets, flags %#x; want %d, %#x", k.name, e.v.Packets, e.v.Flags, wantFlow[k.key], k.flags)
		}
	}
	if len(got) != len(wantFlow) {
		t.Errorf("%d flows, want %d: %+v", len(got), len(wantFlow), got)
	}
	for _, cn := range []datapath.Counter{datapath.CounterTruncated, datapath.CounterMalformed, datapath.CounterNonIP, datapath.CounterFragUnmatched} {
		if c[cn] != wantCounter[cn] {
			t.Errorf("counter %d = %d, want %d", cn, c[cn], wantCounter[cn])
		}
	}
}

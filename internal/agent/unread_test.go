package agent_test

import (
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// Live, through a veth pair: frames whose headers cannot be read to the end
// (AF_PACKET, so the stack does not fix them), each kind a different number
// of times. Each ends in a flow, counted once across veth-a's egress and
// veth-b's ingress and flagged, or, without readable addresses, in
// malformed_packets_total by reason, once per hook (two here): flow packets
// + counters / 2 == frames sent, exactly (docs/design/counting.md,
// "Packets the parser cannot read"; the datapath's
// TestUnreadablePacketsAreCounted has every exit).
func TestUnreadablePacketsLive(t *testing.T) {
	p := agenttest.NewPair(t)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=none", "--cache-active-timeout=1h")
	la, lb := link(t, p.A, p.IfA), link(t, p.B, p.IfB)
	var dst, src packet.MAC
	copy(dst[:], lb.Attrs().HardwareAddr)
	copy(src[:], la.Attrs().HardwareAddr)
	eth4 := packet.Eth(packet.EtherTypeIPv4, packet.MACs(dst, src))
	eth6 := packet.Eth(packet.EtherTypeIPv6, packet.MACs(dst, src))
	dstopts := packet.ExtHeader(packet.ProtoDstOpts, 0)
	ihl := func(b byte) []byte {
		ip := packet.IPv4(packet.ProtoUDP, "10.77.0.9", "10.77.0.1", 8)
		ip[0] = b
		return ip
	}
	type kind struct {
		name   string
		frames [][]byte
		src    string // the flow's source; "" for a counter
		l4     bool
		n      int
	}
	kinds := []kind{
		{"truncated udp", [][]byte{packet.Cat(eth4, packet.IPv4(packet.ProtoUDP, "10.77.0.2", "10.77.0.1", 8), packet.UDP(1, 2, 0)[:5])}, "10.77.0.2", true, 3},
		{"tcp data offset < 5", [][]byte{packet.Cat(eth4, packet.IPv4(packet.ProtoTCP, "10.77.0.3", "10.77.0.1", 20), packet.TCP(1, 2, packet.SYN, packet.DataOffset(3)))}, "10.77.0.3", true, 4},
		{"tiny first fragment and its second", [][]byte{
			packet.Cat(eth4, packet.IPv4(packet.ProtoTCP, "10.77.0.4", "10.77.0.1", 8, packet.Frag(packet.MF, 0), packet.ID(7)), packet.TCP(1, 2, packet.SYN)[:8]),
			packet.Cat(eth4, packet.IPv4(packet.ProtoTCP, "10.77.0.4", "10.77.0.1", 12, packet.Frag(0, 1), packet.ID(7)), packet.TCP(1, 2, packet.SYN)[8:]),
		}, "10.77.0.4", true, 5},
		{"ipv4 options past the packet", [][]byte{packet.Cat(eth4, func() []byte {
			ip := packet.IPv4(packet.ProtoUDP, "10.77.0.5", "10.77.0.1", 8)
			ip[0] = 0x4f
			return ip
		}(), packet.UDP(1, 2, 0))}, "10.77.0.5", false, 6},
		{"seven ipv6 extension headers", [][]byte{packet.Cat(eth6, packet.IPv6(packet.ProtoDstOpts, "fd77::5", "fd77::1", 64),
			dstopts, dstopts, dstopts, dstopts, dstopts, dstopts, packet.ExtHeader(packet.ProtoUDP, 0), packet.UDP(1, 2, 0))}, "fd77::5", false, 7},
		{"tiny first ipv6 fragment", [][]byte{packet.Cat(eth6, packet.IPv6(packet.ProtoFragment, "fd77::6", "fd77::1", 12), packet.Fragment6(packet.ProtoUDP, 0, true, 9), packet.UDP(1, 2, 0)[:4])}, "fd77::6", true, 8},
		{"truncated ipv4 header", [][]byte{packet.Cat(eth4, packet.IPv4(packet.ProtoUDP, "10.77.1.1", "10.77.0.1", 8)[:12])}, "", false, 9},
		{"truncated ipv6 header", [][]byte{packet.Cat(eth6, packet.IPv6(packet.ProtoUDP, "fd77::1:1", "fd77::1", 8)[:30])}, "", false, 10},
		{"ipv4 ihl < 5", [][]byte{packet.Cat(eth4, ihl(0x44), packet.UDP(1, 2, 0))}, "", false, 11},
		{"ip version not the ether type's", [][]byte{packet.Cat(eth4, ihl(0x65), packet.UDP(1, 2, 0))}, "", false, 12},
	}
	before, err := h.A.DP.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	var sent, toFlows, toCounters uint64
	for _, k := range kinds {
		for range k.n {
			wireSendFrames(t, p.A, la.Attrs().Index, k.frames)
		}
		n := uint64(k.n * len(k.frames))
		sent += n
		if k.src != "" {
			toFlows += n
		} else {
			toCounters += n
		}
	}
	after, err := h.A.DP.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	flows := h.Stop()

	bySrc := map[string]agenttest.JSONFlow{}
	var inFlows uint64
	for _, f := range flows {
		if strings.HasPrefix(f.SrcAddr, "10.77.") || strings.HasPrefix(f.SrcAddr, "fd77:") {
			inFlows += f.Packets
			if _, dup := bySrc[f.SrcAddr]; dup {
				t.Errorf("two records from %s", f.SrcAddr)
			}
			bySrc[f.SrcAddr] = f
		}
	}
	trunc := after[datapath.CounterTruncated] - before[datapath.CounterTruncated]
	invalid := after[datapath.CounterMalformed] - before[datapath.CounterMalformed]
	t.Logf("sent %d frames: %d in %d flows, counters truncated %d, invalid %d (two hooks each)", sent, inFlows, len(bySrc), trunc, invalid)
	if (trunc+invalid)%2 != 0 || inFlows+(trunc+invalid)/2 != sent {
		t.Errorf("flows %d + counters (%d + %d) / 2 hooks = %d, want the %d sent", inFlows, trunc, invalid, inFlows+(trunc+invalid)/2, sent)
	}
	if inFlows != toFlows || trunc != 2*uint64(9+10) || invalid != 2*uint64(11+12) {
		t.Errorf("flows %d (want %d), truncated %d (want %d), invalid %d (want %d)", inFlows, toFlows, trunc, 2*(9+10), invalid, 2*(11+12))
	}
	for _, k := range kinds {
		if k.src == "" {
			continue
		}
		f, ok := bySrc[k.src]
		if !ok {
			t.Errorf("%s: no flow from %s", k.name, k.src)
			continue
		}
		if f.Packets != uint64(k.n*len(k.frames)) || f.L4Unread != k.l4 || f.ExtUnread == k.l4 || f.SrcPort != 0 || f.DstPort != 0 || len(f.Interfaces) != 2 {
			t.Errorf("%s: %d packets, l4_unread %v, ext_unread %v, ports %d->%d, %d interfaces; want %d, %v, %v, 0->0, 2",
				k.name, f.Packets, f.L4Unread, f.ExtUnread, f.SrcPort, f.DstPort, len(f.Interfaces), k.n*len(k.frames), k.l4, !k.l4)
		}
	}
}

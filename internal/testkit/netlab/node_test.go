package netlab

import (
	"testing"
)

// The node lab's own arithmetic against the kernel's other counters: what
// Wire says each pod sent is what its sockets sent (nstat's TcpOutSegs
// counts segments; retransmitted ones are in RetransSegs only, and a busy
// machine makes a few: tail-loss probes), so the node-balance test's
// expectations are right.
func TestNodeLabWire(t *testing.T) {
	Require(t)
	l := NewNodeLab(t, t.TempDir())
	before := l.ReadCounters(t)
	tcpSent := func() uint64 {
		c := NetCounters(t, l.A1, "snmp", "Tcp:")
		return c["OutSegs"] + c["RetransSegs"]
	}
	tcpBefore := tcpSent()
	tr := DefaultNodeTraffic
	const rounds = 2 // the lab can run its traffic again, as a benchmark's rounds do
	for range rounds {
		if err := l.Traffic(tr); err != nil {
			t.Fatal(err)
		}
	}
	after := l.Settle(t)
	tcpSegs := tcpSent() - tcpBefore
	wire, gso := l.Wire(t, before, after)
	if gso == 0 {
		t.Errorf("the bulk transfer made no GSO buffer")
	}
	frags := uint64((tr.FragSize + 8 + 1479) / 1480)
	r := func(n int) uint64 { return rounds * uint64(n) }
	a1 := r(tr.ServiceDatagrams+tr.DroppedDatagrams) + r(tr.FragDatagrams)*frags + tcpSegs
	for _, c := range []struct {
		iface string
		got   uint64
		want  uint64
	}{
		{"a1 sent", wire[l.A1.Name+"/nb-eth0"].TxPackets, a1},
		{"a2 sent", wire[l.A2.Name+"/nb-eth0"].TxPackets, r(tr.OverlayDatagrams)},
		{"c1 sent", wire[l.C1.Name+"/nb-eth0"].TxPackets, r(tr.OverlayReplies)},
		{"b2 sent", wire[l.B2.Name+"/nb-eth0"].TxPackets, 0},
		{"node A sent", l.NodeSent(before, after), r(tr.NodeDatagrams)},
		{"b1 received", wire[l.B1.Name+"/nb-eth0"].RxPackets, r(tr.ServiceDatagrams+tr.NodeDatagrams) + r(tr.FragDatagrams)*frags + tcpSegs},
		{"tun received", wire[l.NodeA.Name+"/nb-tun"].RxPackets, r(tr.TunDatagrams + tr.TinyFragments + tr.LongIPv6)},
		{"node A's uplink received", wire[l.NodeA.Name+"/nb-up"].RxPackets, r(tr.OverlayReplies + tr.NonIP)},
	} {
		if c.got != c.want {
			t.Errorf("%s %d packets, want %d", c.iface, c.got, c.want)
		}
	}
	t.Logf("GSO: %d extra segments; TcpOutSegs + RetransSegs %d; wire %+v", gso, tcpSegs, wire)
}

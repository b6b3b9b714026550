package agent_test

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// With --overlay-outer-flows the VXLAN lab's node-to-node tunnel flow is a
// record of its own, marked overlay_outer: the outer 5-tuple (node1 to
// node2, UDP 4789), the tunnel and its VNI, the uplink interface that
// counted it, and exactly the packets and bytes the uplink carried in the
// tunnel. The inner flow is as without the option (the 200 datagrams,
// every interface), and a sum over the records that skips the marked ones
// is the 200 datagrams sent.
func TestOverlayOuterFlowsMarked(t *testing.T) {
	l := newOverlayLab(t)
	const n, payload = 200, 100
	recv := agenttest.MustListen(t, l.pod2, ovlPod2+":6000")
	if err := recv.SetReadBuffer(8 << 20); err != nil {
		t.Fatal(err)
	}
	got := countUDP(t, recv)
	h := agenttest.Start(t, 6, agent.Options{}, "--netns="+l.node1.Name+","+l.node2.Name, "--overlay-outer-flows")
	u1Before, err := netlab.ReadLinkStats(l.node1, "u1")
	if err != nil {
		t.Fatal(err)
	}
	u2Before, err := netlab.ReadLinkStats(l.node2, "u2")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlab.UDPSend(l.pod1, ovlPod1+":5000", ovlPod2+":6000", make([]byte, payload), n); err != nil {
		t.Fatal(err)
	}
	if c := got.wait(n); c != n {
		t.Fatalf("pod2 received %d datagrams, want %d", c, n)
	}
	u1After, err := netlab.ReadLinkStats(l.node1, "u1")
	if err != nil {
		t.Fatal(err)
	}
	u2After, err := netlab.ReadLinkStats(l.node2, "u2")
	if err != nil {
		t.Fatal(err)
	}
	flows := h.Stop()

	var counted, marked, markedBytes uint64
	var outer []agenttest.JSONFlow
	for _, f := range flows {
		if f.OverlayOuter {
			marked += f.Packets
			markedBytes += f.Bytes
			outer = append(outer, f)
			continue
		}
		counted += f.Packets
	}
	if counted != n {
		t.Errorf("sum over the unmarked records: %d packets, want the %d sent", counted, n)
	}
	if pkts, _, _ := agenttest.Sum(flows, agenttest.Match{Src: ovlPod1, Dst: ovlPod2, Sport: 5000, Dport: 6000, Proto: 17}); pkts != n {
		t.Errorf("inner flow: %d packets, want %d", pkts, n)
	}
	// The uplink carried the tunnel's packets out of node1 (u1 tx) and
	// into node2 (u2 rx): the same packets, counted once, where the
	// generation first saw the outer flow (u1).
	u1tx, u1txBytes := u1After.TxPackets-u1Before.TxPackets, u1After.TxBytes-u1Before.TxBytes
	u2rx := u2After.RxPackets - u2Before.RxPackets
	if u1tx != n || u2rx != n {
		t.Fatalf("the uplink carried tx %d rx %d packets, want %d (only the test's datagrams cross the lab)", u1tx, u2rx, n)
	}
	if marked != u1tx || markedBytes != u1txBytes {
		t.Errorf("overlay_outer records: %d packets %d bytes, the uplink carried %d packets %d bytes", marked, markedBytes, u1tx, u1txBytes)
	}
	for _, f := range outer {
		ifs := netnsLess(f.Ifaces(), l)
		if f.SrcAddr != ovlNode1 || f.DstAddr != ovlNode2 || f.DstPort != 4789 || f.Proto != 17 || f.TunnelType != "vxlan" || f.TunnelVNI != ovlVNI ||
			f.TunnelSrcAddr != ovlNode1 || f.TunnelDstAddr != ovlNode2 || (ifs != "node1/u1:egress" && ifs != "node2/u2:ingress") {
			t.Errorf("overlay_outer record %s:%d -> %s:%d/%d %s vni %d %s -> %s on %s, want %s -> %s:4789/17 vxlan vni %d on node1/u1:egress",
				f.SrcAddr, f.SrcPort, f.DstAddr, f.DstPort, f.Proto, f.TunnelType, f.TunnelVNI, f.TunnelSrcAddr, f.TunnelDstAddr, ifs, ovlNode1, ovlNode2, ovlVNI)
		}
	}
	t.Logf("%d records: unmarked sum %d packets; %d overlay_outer records, %d packets %d bytes (u1 tx %d packets %d bytes, u2 rx %d)",
		len(flows), counted, len(outer), marked, markedBytes, u1tx, u1txBytes, u2rx)
}

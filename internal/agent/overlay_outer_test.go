package agent_test

import (
	"net"
	"strconv"
	"testing"
	"time"

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

// A bulk TCP transfer (GSO: the pod's TCP hands 64 KB buffers to its veth,
// the node forwards them whole into the VXLAN device, which encapsulates
// them as UDP tunnel GSO buffers on the uplink) through the VXLAN lab,
// both nodes watched, with --overlay-outer-flows. Each direction's inner
// flow counts exactly the segments its pod's TCP sent (TcpOutSegs +
// RetransSegs of the pod's namespace, the connection being its only TCP
// traffic), and so does each direction's tunnel flow (overlay_outer) on
// the uplink: the encapsulated buffers count as the wire segments the
// uplink carried. The uplink's own counters count buffers, fewer: GSO was
// in effect.
func TestOverlayGSOBulkTCP(t *testing.T) {
	l := newOverlayLab(t)
	// The pods' MTU fits the tunnel's (1500 less VXLAN's 50 bytes), as a
	// CNI sets it: no PMTU discovery in the transfer.
	for _, x := range []struct {
		ns   *netlab.Netns
		name string
	}{{l.pod1, "eth0"}, {l.node1, "pv1"}, {l.pod2, "eth0"}, {l.node2, "pv2"}} {
		netlab.Run(t, x.ns, "ip", "link", "set", x.name, "mtu", "1450")
	}
	const port, size = 7000, 4 << 20
	h := agenttest.Start(t, 6, agent.Options{}, "--netns="+l.node1.Name+","+l.node2.Name, "--overlay-outer-flows")
	snmp := func() (a, b map[string]uint64, up netlab.Stats) {
		s, err := netlab.ReadLinkStats(l.node1, "u1")
		if err != nil {
			t.Fatal(err)
		}
		return netlab.NetCounters(t, l.pod1, "snmp", "Tcp:"), netlab.NetCounters(t, l.pod2, "snmp", "Tcp:"), s
	}
	a0, b0, u0 := snmp()
	addr := net.JoinHostPort(ovlPod2, strconv.Itoa(port))
	got := agenttest.TCPSink(t, l.pod2, "tcp4", addr)
	if err := l.pod1.Do(func() error {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write(make([]byte, size)); err != nil {
			return err
		}
		return c.Close()
	}); err != nil {
		t.Fatal(err)
	}
	agenttest.AwaitReceived(t, got, size)
	// Settled: no segment leaves either pod for 300 ms (FIN, last ACK).
	var a1, b1 map[string]uint64
	var u1 netlab.Stats
	for stable, deadline := 0, time.Now().Add(10*time.Second); stable < 3; {
		if time.Now().After(deadline) {
			t.Fatal("TCP counters still moving 10s after the transfer")
		}
		time.Sleep(100 * time.Millisecond)
		a, b, u := snmp()
		if a1 != nil && a["OutSegs"] == a1["OutSegs"] && b["OutSegs"] == b1["OutSegs"] {
			stable++
		} else {
			stable = 0
		}
		a1, b1, u1 = a, b, u
	}
	flows := h.Stop()

	segsA := a1["OutSegs"] - a0["OutSegs"] + a1["RetransSegs"] - a0["RetransSegs"]
	segsB := b1["OutSegs"] - b0["OutSegs"] + b1["RetransSegs"] - b0["RetransSegs"]
	up, _, upRecs := agenttest.Sum(flows, agenttest.Match{Src: ovlPod1, Dst: ovlPod2, Dport: port, Proto: 6})
	down, _, _ := agenttest.Sum(flows, agenttest.Match{Src: ovlPod2, Dst: ovlPod1, Sport: port, Proto: 6})
	var outerUp, outerDown uint64
	for _, f := range flows {
		if !f.OverlayOuter {
			continue
		}
		switch {
		case f.SrcAddr == ovlNode1 && f.DstAddr == ovlNode2:
			outerUp += f.Packets
		case f.SrcAddr == ovlNode2 && f.DstAddr == ovlNode1:
			outerDown += f.Packets
		}
	}
	upSkbs := u1.TxPackets - u0.TxPackets
	t.Logf("pod1→pod2: inner flow %d packets, tunnel flow %d, TcpOutSegs+RetransSegs(pod1) %d (retrans %d), u1 tx %d buffers; pod2→pod1: inner %d, tunnel %d, TCP %d",
		up, outerUp, segsA, a1["RetransSegs"]-a0["RetransSegs"], upSkbs, down, outerDown, segsB)
	if len(upRecs) > 0 {
		t.Logf("pod1→pod2 lists %s", netnsLess(upRecs[0].Ifaces(), l))
	}
	if up != segsA || down != segsB {
		t.Errorf("inner flows %d and %d packets, the pods' TCP sent %d and %d segments", up, down, segsA, segsB)
	}
	if outerUp != segsA || outerDown != segsB {
		t.Errorf("tunnel flows %d and %d packets, the pods' TCP sent %d and %d segments", outerUp, outerDown, segsA, segsB)
	}
	if upSkbs >= segsA {
		t.Errorf("u1 transmitted %d buffers for %d segments: GSO was not in effect, the test shows nothing", upSkbs, segsA)
	}
}

package xlat_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// A counting hook after NAT that is not certainly first: only the node's
// veth toward the backend is watched (--interfaces=nb), so the pod's
// datagrams, forwarded and DNATed by the node, are first seen there, after
// NAT; the host-network client's too (certainly first there). Each is
// counted once, in one record keyed before NAT that carries the tuple
// after it, and nb's packets in the records are what the kernel says nb
// carried. After a flow's first packets the alias counts them itself
// (xlat_delegate, with the flow's note): no second lookup per packet
// (docs/design/counting.md, "The alias in the flow map").
func TestServiceCountedAfterNATOnly(t *testing.T) {
	l := newSvcLab(t, false)
	echoed := l.echo(t, 2*svcDatagrams)
	rx0, _, tx0, _ := netlab.LinkStats(l.node, "nb")
	// No flip while the test reads the maps (the alias, the note).
	h := agenttest.Start(t, 1, agent.Options{}, "--netns="+l.node.Name, "--interfaces=nb", "--features=xlat",
		"--cache-active-timeout=5m")
	sendTo(t, l.a, net.JoinHostPort(svcPod, "4000"), svcVIP, svcDatagrams)
	sendTo(t, l.node, net.JoinHostPort(svcNodeB, "4100"), svcVIP, svcDatagrams)
	if got := <-echoed; got != 2*svcDatagrams {
		t.Fatalf("backend answered %d datagrams, want %d", got, 2*svcDatagrams)
	}
	time.Sleep(50 * time.Millisecond)
	checkDelegated(t, h, svcPod, svcClientPort, "pod")
	checkDelegated(t, h, svcNodeB, svcHostPort, "host-network client")
	flows := h.Stop()
	rx1, _, tx1, _ := netlab.LinkStats(l.node, "nb")

	node := l.node.Name + "/"
	for _, w := range []want{
		{what: "pod to Service",
			match: agenttest.Match{Src: svcPod, Dst: svcVIP, Sport: svcClientPort, Dport: svcPort, Proto: 17},
			xsrc:  svcPod, xsport: svcClientPort, xdst: svcBackend, xdport: svcTargetPort,
			ifaces: []string{node + "nb:egress"},
			after:  agenttest.Match{Src: svcPod, Dst: svcBackend, Sport: svcClientPort, Dport: svcTargetPort, Proto: 17}},
		{what: "backend's reply",
			match: agenttest.Match{Src: svcBackend, Dst: svcPod, Sport: svcTargetPort, Dport: svcClientPort, Proto: 17},
			xsrc:  svcVIP, xsport: svcPort, xdst: svcPod, xdport: svcClientPort,
			ifaces: []string{node + "nb:ingress"},
			after:  agenttest.Match{Src: svcVIP, Dst: svcPod, Sport: svcPort, Dport: svcClientPort, Proto: 17}},
		{what: "host-network client to Service",
			match: agenttest.Match{Src: svcNodeB, Dst: svcVIP, Sport: svcHostPort, Dport: svcPort, Proto: 17},
			xsrc:  svcNodeB, xdst: svcBackend, xdport: svcTargetPort,
			ifaces: []string{node + "nb:egress"},
			after:  agenttest.Match{Src: svcNodeB, Dst: svcBackend, Sport: svcHostPort, Dport: svcTargetPort, Proto: 17}},
	} {
		check(t, flows, w)
	}
	// Per interface: the packets of the records listing nb, each way, are
	// what nb carried (its kernel counters).
	var in, out uint64
	for _, f := range flows {
		for _, i := range f.Interfaces {
			if i.Name == "nb" && i.Direction == "ingress" {
				in += f.Packets
			}
			if i.Name == "nb" && i.Direction == "egress" {
				out += f.Packets
			}
		}
	}
	t.Logf("nb: records %d in, %d out; kernel %d received, %d sent", in, out, rx1-rx0, tx1-tx0)
	if in != rx1-rx0 || out != tx1-tx0 {
		t.Errorf("nb: the records say %d packets in and %d out, the kernel %d and %d", in, out, rx1-rx0, tx1-tx0)
	}
	if t.Failed() {
		for _, f := range flows {
			t.Logf("%s:%d -> %s:%d p%d pk=%d xlat %s:%d -> %s:%d %s", f.SrcAddr, f.SrcPort, f.DstAddr, f.DstPort, f.Proto,
				f.Packets, f.XlatSrcAddr, f.XlatSrcPort, f.XlatDstAddr, f.XlatDstPort, f.Ifaces())
		}
	}
}

// A hand-over takes the delegation back. Only nb is watched at first: the
// pod's datagrams are counted after NAT, by the alias once delegated. Then
// the pod's packets leave through a new veth, late-a, which the agent
// watches as it appears: its egress is certainly first, counts, and takes
// the flow's counting over; before it does, it takes nb's delegation off
// the alias (xlat_handover, through the flow's note), so the packets it
// counted are not counted again at nb. Every datagram once, in the flow
// before NAT, whose records list both hooks.
func TestServiceHandOverAfterNAT(t *testing.T) {
	l := newSvcLab(t, false)
	const n1, n2 = 50, 50
	echoed := l.echo(t, n1+n2)
	_, _, tx0, _ := netlab.LinkStats(l.node, "nb")
	h := agenttest.Start(t, 1, agent.Options{}, "--netns="+l.node.Name+","+l.a.Name, "--interfaces=nb,late-a",
		"--features=xlat", "--cache-active-timeout=5m")
	c, err := netlab.UDPListen(l.a, net.JoinHostPort(svcPod, "4000"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	vip := &net.UDPAddr{IP: net.ParseIP(svcVIP), Port: svcPort}
	sendOn(t, c, vip, n1)
	time.Sleep(50 * time.Millisecond)
	alias, flow := postNAT(t, h, svcPod, svcClientPort)
	if alias.ListedOnly&1 != 0 || alias.Packets == 0 || flow.Flags&datapath.FlowFlagXlatVia == 0 {
		t.Fatalf("before the hand-over: alias listed_only %#b with %d packets, flow flags %#x: want nb delegated",
			alias.ListedOnly, alias.Packets, flow.Flags)
	}

	// The new way out of the pod: late-a -> late-n, the Service's address
	// routed through it (the replies still come back through a0).
	la, ln := netlab.Veth(t, l.a, "late-a", l.node, "late-n")
	netlab.AddAddr(t, l.a, "late-a", "10.213.7.1/24")
	netlab.AddAddr(t, l.node, "late-n", "10.213.7.254/24")
	netlab.Neigh(t, l.a, "late-a", "10.213.7.254", ln.Attrs().HardwareAddr)
	netlab.Neigh(t, l.node, "late-n", "10.213.7.1", la.Attrs().HardwareAddr)
	for _, k := range []string{"net.ipv4.conf.all.rp_filter", "net.ipv4.conf.late-n.rp_filter"} {
		if err := netlab.Sysctl(l.node, k, "0"); err != nil {
			t.Fatal(err)
		}
	}
	netlab.Route(t, l.a, svcVIP+"/32", "10.213.7.254", "late-a")
	waitAttached(t, h, 2)
	_, _, lateTx0, _ := netlab.LinkStats(l.a, "late-a")
	sendOn(t, c, vip, n2)
	if got := <-echoed; got != n1+n2 {
		t.Fatalf("backend answered %d datagrams, want %d", got, n1+n2)
	}
	time.Sleep(50 * time.Millisecond)
	alias2, flow2 := postNAT(t, h, svcPod, svcClientPort)
	t.Logf("alias: %d packets before the hand-over, %d after (listed_only %#b, flags %#x); flow: %d, then %d packets",
		alias.Packets, alias2.Packets, alias2.ListedOnly, alias2.Flags, flow.Packets, flow2.Packets)
	if alias2.ListedOnly&1 == 0 || alias2.Flags&flowXlatDone == 0 || alias2.Packets != alias.Packets {
		t.Errorf("after the hand-over: alias listed_only %#b, flags %#x, %d packets (%d before): want it counting no more",
			alias2.ListedOnly, alias2.Flags, alias2.Packets, alias.Packets)
	}
	flows := h.Stop()
	_, _, tx1, _ := netlab.LinkStats(l.node, "nb")
	_, _, lateTx1, _ := netlab.LinkStats(l.a, "late-a")

	m := agenttest.Match{Src: svcPod, Dst: svcVIP, Sport: svcClientPort, Dport: svcPort, Proto: 17}
	pk, _, recs := agenttest.Sum(flows, m)
	t.Logf("pod to Service: %d packets in %d records; nb sent %d, late-a %d", pk, len(recs), tx1-tx0, lateTx1-lateTx0)
	if pk != n1+n2 || tx1-tx0 != n1+n2 || lateTx1-lateTx0 != n2 {
		t.Errorf("pod to Service: %d packets in the records, want %d (nb sent %d, late-a %d of them)", pk, n1+n2, tx1-tx0, lateTx1-lateTx0)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		for _, i := range r.Interfaces {
			seen[i.Name+":"+i.Direction] = true
		}
		if r.XlatDstAddr != svcBackend || r.XlatDstPort != svcTargetPort {
			t.Errorf("pod to Service: record with xlat %s:%d -> %s:%d", r.XlatSrcAddr, r.XlatSrcPort, r.XlatDstAddr, r.XlatDstPort)
		}
	}
	if len(seen) != 2 || !seen["nb:egress"] || !seen["late-a:egress"] {
		t.Errorf("pod to Service: the records list %v, want nb:egress and late-a:egress", seen)
	}
	after := agenttest.Match{Src: svcPod, Dst: svcBackend, Proto: 17}
	if pk, _, recs := agenttest.Sum(flows, after); len(recs) != 0 {
		t.Errorf("%d records (%d packets) under the tuple after NAT: counted twice", len(recs), pk)
	}
	if t.Failed() {
		for _, f := range flows {
			t.Logf("%s:%d -> %s:%d p%d pk=%d xlat %s:%d -> %s:%d %s", f.SrcAddr, f.SrcPort, f.DstAddr, f.DstPort, f.Proto,
				f.Packets, f.XlatSrcAddr, f.XlatSrcPort, f.XlatDstAddr, f.XlatDstPort, f.Ifaces())
		}
	}
}

// flowXlatDone is FLOW_F_XLAT_DONE (bpf/types.h): on an alias, its
// delegation is decided for the generation.
const flowXlatDone = 4

// postNAT reads, from the active flow map, the alias of src:sport ->
// backend:8080 and the flow it names, src:sport -> Service:80.
func postNAT(t *testing.T, h *agenttest.Harness, src string, sport uint16) (alias, flow datapath.FlowValue) {
	t.Helper()
	k := datapath.FlowKey{SrcPort: sport, DstPort: svcTargetPort, Proto: 17}
	k.SrcIp, k.DstIp = netip.MustParseAddr(src).As16(), netip.MustParseAddr(svcBackend).As16()
	pre := datapath.FlowKey{SrcPort: sport, DstPort: svcPort, Proto: 17}
	pre.SrcIp, pre.DstIp = netip.MustParseAddr(src).As16(), netip.MustParseAddr(svcVIP).As16()
	for _, m := range h.A.DP.Maps.Flows {
		if m.Lookup(&k, &alias) == nil && m.Lookup(&pre, &flow) == nil {
			return alias, flow
		}
	}
	t.Fatalf("no flow map holds %s:%d's alias and its flow", src, sport)
	return
}

// checkDelegated: the alias of src's datagrams after NAT counts them for
// their flow (which is Via), the two hold all of them, and the flow's note
// names the alias.
func checkDelegated(t *testing.T, h *agenttest.Harness, src string, sport uint16, what string) {
	t.Helper()
	a, v := postNAT(t, h, src, sport)
	t.Logf("%s: %d packets in the alias, %d in the flow", what, a.Packets, v.Packets)
	if a.Flags&datapath.FlowFlagXlatAlias == 0 || a.ListedOnly&1 != 0 || a.Packets == 0 || v.Flags&datapath.FlowFlagXlatVia == 0 {
		t.Errorf("%s: alias flags %#x, listed_only %#b, %d packets; its flow's flags %#x: want the alias counting, its flow Via",
			what, a.Flags, a.ListedOnly, a.Packets, v.Flags)
	}
	if a.Packets+v.Packets != svcDatagrams {
		t.Errorf("%s: %d packets in the alias + %d in the flow, want %d", what, a.Packets, v.Packets, svcDatagrams)
	}
}

func waitAttached(t *testing.T, h *agenttest.Harness, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for h.A.DP.Attached() != want {
		if time.Now().After(deadline) {
			t.Fatalf("attached to %d interfaces, want %d", h.A.DP.Attached(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

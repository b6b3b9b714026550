package xlat_test

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// svcLab is issue #29's Service lab: two pods behind a node namespace that
// DNATs a ClusterIP to the backend, in PREROUTING (for the pods) and in
// OUTPUT (for the node's own sockets), as kube-proxy does:
//
//	a (10.213.5.1) -- a0 | na -- node -- nb | b0 -- b (10.213.6.2)
//	node: 10.213.9.9:80/udp -> 10.213.6.2:8080 (and masquerade out of nb when asked)
type svcLab struct {
	a, node, b *netlab.Netns
	ad         svcAddrs
}

const (
	svcVIP, svcPod, svcBackend  = "10.213.9.9", "10.213.5.1", "10.213.6.2"
	svcNodeA, svcNodeB          = "10.213.5.254", "10.213.6.254"
	svcPort, svcTargetPort      = 80, 8080
	svcClientPort, svcHostPort  = 4000, 4100
	svcDatagrams                = 100
	svcPayload                  = "ping-0123456789"
	svcWantIfaces, svcAllIfaces = 2, 4
	svcDirect                   = 50
)

// svcAddrs are the lab's addresses in one family.
type svcAddrs struct {
	vip, pod, backend, nodeA, nodeB string
	bits                            string // the links' prefix length
	all, svcNet                     string // the lab's range, the Service range
	nft                             string // nftables family and address keyword
	v6                              bool
}

var (
	svcV4 = svcAddrs{vip: svcVIP, pod: svcPod, backend: svcBackend, nodeA: svcNodeA, nodeB: svcNodeB,
		bits: "/24", all: "10.213.0.0/16", svcNet: "10.213.9.0/24", nft: "ip"}
	svcV6 = svcAddrs{vip: "fd29:9::9", pod: "fd29:5::1", backend: "fd29:6::2", nodeA: "fd29:5::fe", nodeB: "fd29:6::fe",
		bits: "/64", all: "fd29::/16", svcNet: "fd29:9::/64", nft: "ip6", v6: true}
)

func newSvcLab(t *testing.T, masquerade bool) *svcLab { return newSvcLabOf(t, svcV4, masquerade) }

func newSvcLabOf(t *testing.T, ad svcAddrs, masquerade bool) *svcLab {
	l := &svcLab{a: netlab.NewNetns(t, "a"), node: netlab.NewNetns(t, "node"), b: netlab.NewNetns(t, "b"), ad: ad}
	for _, ns := range []*netlab.Netns{l.a, l.node, l.b} {
		netlab.Quiet(t, ns)
		if ad.v6 {
			netlab.QuietIPv6(t, ns)
		}
	}
	fwd := "net.ipv4.ip_forward"
	if ad.v6 {
		fwd = "net.ipv6.conf.all.forwarding"
	}
	if err := netlab.Sysctl(l.node, fwd, "1"); err != nil {
		t.Fatal(err)
	}
	a0, na := netlab.Veth(t, l.a, "a0", l.node, "na")
	nb, b0 := netlab.Veth(t, l.node, "nb", l.b, "b0")
	netlab.AddAddr(t, l.a, "a0", ad.pod+ad.bits)
	netlab.AddAddr(t, l.node, "na", ad.nodeA+ad.bits)
	netlab.AddAddr(t, l.node, "nb", ad.nodeB+ad.bits)
	netlab.AddAddr(t, l.b, "b0", ad.backend+ad.bits)
	netlab.Neigh(t, l.a, "a0", ad.nodeA, na.Attrs().HardwareAddr)
	netlab.Neigh(t, l.node, "na", ad.pod, a0.Attrs().HardwareAddr)
	netlab.Neigh(t, l.node, "nb", ad.backend, b0.Attrs().HardwareAddr)
	netlab.Neigh(t, l.b, "b0", ad.nodeB, nb.Attrs().HardwareAddr)
	netlab.Route(t, l.a, ad.all, ad.nodeA, "a0")
	netlab.Route(t, l.b, ad.all, ad.nodeB, "b0")
	// The node reaches the Service range through nb (its source: nodeB).
	netlab.Route(t, l.node, ad.svcNet, ad.backend, "nb")
	nft := func(rule string) { netlab.Run(t, l.node, "nft", rule) }
	nft("add table " + ad.nft + " svc")
	nft("add chain " + ad.nft + " svc pre { type nat hook prerouting priority dstnat; }")
	nft("add chain " + ad.nft + " svc out { type nat hook output priority -100; }")
	to := ad.backend + ":8080"
	if ad.v6 {
		to = "[" + ad.backend + "]:8080"
	}
	for _, c := range []string{"pre", "out"} {
		nft("add rule " + ad.nft + " svc " + c + " " + ad.nft + " daddr " + ad.vip + " udp dport 80 dnat to " + to)
	}
	if masquerade {
		nft("add chain " + ad.nft + " svc post { type nat hook postrouting priority srcnat; }")
		nft("add rule " + ad.nft + " svc post oifname nb masquerade")
	}
	return l
}

// echo answers every datagram the backend receives, n of them, and reports
// how many it answered.
func (l *svcLab) echo(t *testing.T, n int) <-chan int {
	c, err := netlab.UDPListen(l.b, net.JoinHostPort(l.ad.backend, "8080"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	done := make(chan int, 1)
	go func() {
		buf := make([]byte, 2048)
		answered := 0
		for answered < n {
			// Generous: the agent starts (its programs verified, which
			// takes seconds on a loaded machine) between the echo's start
			// and the first datagram; the loop ends once n are answered.
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			k, from, err := c.ReadFromUDP(buf)
			if err != nil {
				break
			}
			if _, err := c.WriteToUDP(buf[:k], from); err != nil {
				break
			}
			answered++
		}
		done <- answered
	}()
	return done
}

// send sends n datagrams from src in ns to the Service and reads the n
// replies, so neither way ends in an ICMP error.
func sendTo(t *testing.T, ns *netlab.Netns, src, vip string, n int) { sendPaced(t, ns, src, vip, n, 0) }

func sendPaced(t *testing.T, ns *netlab.Netns, src, vip string, n int, pace time.Duration) {
	t.Helper()
	c, err := netlab.UDPListen(ns, src)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendOnPaced(t, c, &net.UDPAddr{IP: net.ParseIP(vip), Port: svcPort}, n, pace)
}

// sendOn sends n datagrams on c to ra, reading each reply (which must come
// from ra).
func sendOn(t *testing.T, c *net.UDPConn, ra *net.UDPAddr, n int) { sendOnPaced(t, c, ra, n, 0) }

func sendOnPaced(t *testing.T, c *net.UDPConn, ra *net.UDPAddr, n int, pace time.Duration) {
	t.Helper()
	buf := make([]byte, 2048)
	got := 0
	for i := 0; i < n; i++ {
		if _, err := c.WriteToUDP([]byte(svcPayload), ra); err != nil {
			t.Fatal(err)
		}
		// One at a time: the replies come back in order, none is lost
		// to a full socket buffer.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, from, err := c.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if !from.IP.Equal(ra.IP) || from.Port != ra.Port {
			t.Fatalf("reply %d from %s, want the Service's %s", i, from, ra)
		}
		got++
		time.Sleep(pace)
	}
	if got != n {
		t.Fatalf("%d replies, want %d", got, n)
	}
}

// want is what one direction of the conversation must be in the records:
// every packet, once, in records keyed on the tuple before NAT that carry
// the tuple after it and list every interface of the packets' way.
type want struct {
	what             string
	match            agenttest.Match // the flow before NAT
	xsrc             string          // its source after NAT
	xsport           uint16          // 0: any (masquerade picks it)
	xdst             string
	xdport           uint16
	ifaces           []string // netns/name:direction
	after            agenttest.Match
	afterSrcIsTarget bool
	// split: the packets may be in several records (flips, a full map):
	// the records together list ifaces, each some of them.
	split bool
	// full: the flow map is full, and so is the enrichment map (the same
	// size): a translation is not required.
	full bool
}

func check(t *testing.T, flows []agenttest.JSONFlow, w want) {
	t.Helper()
	pk, _, recs := agenttest.Sum(flows, w.match)
	t.Logf("%s: %d packets in %d records", w.what, pk, len(recs))
	if pk != svcDatagrams {
		t.Errorf("%s: the records of %+v sum to %d packets, want %d", w.what, w.match, pk, svcDatagrams)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		for _, i := range r.Interfaces {
			seen[i.Netns+"/"+i.Name+":"+i.Direction] = true
		}
		if w.split {
			if !w.full && r.Packets > 0 && r.XlatDstAddr == "" {
				t.Errorf("%s: a record with %d packets and no translation", w.what, r.Packets)
			}
			continue
		}
		if r.XlatSrcAddr != w.xsrc || (w.xsport != 0 && r.XlatSrcPort != w.xsport) || r.XlatSrcPort == 0 ||
			r.XlatDstAddr != w.xdst || r.XlatDstPort != w.xdport {
			t.Errorf("%s: record has xlat %s:%d -> %s:%d, want %s:%d -> %s:%d", w.what,
				r.XlatSrcAddr, r.XlatSrcPort, r.XlatDstAddr, r.XlatDstPort, w.xsrc, w.xsport, w.xdst, w.xdport)
		}
		for _, i := range w.ifaces {
			if !slices.ContainsFunc(r.Interfaces, func(x struct {
				Name      string `json:"name"`
				Ifindex   uint32 `json:"ifindex"`
				Netns     string `json:"netns"`
				Direction string `json:"direction"`
			}) bool {
				return x.Netns+"/"+x.Name+":"+x.Direction == i
			}) {
				t.Errorf("%s: record lists %s, want %s among them", w.what, r.Ifaces(), i)
			}
		}
		if len(r.Interfaces) != len(w.ifaces) {
			t.Errorf("%s: record lists %s, want exactly %v", w.what, r.Ifaces(), w.ifaces)
		}
	}
	if w.split && len(seen) != len(w.ifaces) {
		t.Errorf("%s: the records list %v, want %v", w.what, seen, w.ifaces)
	}
	for _, i := range w.ifaces {
		if w.split && !seen[i] {
			t.Errorf("%s: no record lists %s", w.what, i)
		}
	}
	// Nothing under the tuple after NAT: that would count the packets twice.
	if pk, _, recs := agenttest.Sum(flows, w.after); len(recs) != 0 {
		t.Errorf("%s: %d records (%d packets) under the tuple after NAT %+v: counted twice", w.what, len(recs), pk, w.after)
		for _, r := range recs {
			t.Logf("  %+v %s", r, r.Ifaces())
		}
	}
}

// Issue #29 items 1 and 2: a pod's datagrams to a ClusterIP, DNATed (and
// masqueraded) by the node, are counted once, in one record keyed on the
// packets as the pod sent them and carrying them as the backend gets them,
// whichever interfaces the agent watches; the replies too. A host-network
// client's datagrams, DNATed in OUTPUT before any hook, are keyed on the
// ClusterIP all the same.
func TestServiceCountedOnce(t *testing.T) {
	for _, c := range []struct {
		name             string
		masquerade, pods bool
		args             []string
		pace             time.Duration // between datagrams
	}{
		{"dnat", false, false, nil, 0},
		{"dnat+pods", false, true, nil, 0},
		{"dnat+masquerade", true, false, nil, 0},
		{"dnat+masquerade+pods", true, true, nil, 0},
		// Across generation flips (the alias confirmed again in each)
		// and with the flow map full (every packet through the overflow
		// ring): the same counts, over several records.
		{"dnat+pods, flips", false, true, []string{"--cache-active-timeout=100ms"}, 4 * time.Millisecond},
		{"dnat+pods, map full", false, true, []string{"--cache-max-flows=1"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newSvcLab(t, c.masquerade)
			echoed := l.echo(t, 2*svcDatagrams)
			ns, n := "--netns="+l.node.Name, svcWantIfaces
			if c.pods {
				ns, n = ns+","+l.a.Name+","+l.b.Name, svcAllIfaces
			}
			h := agenttest.Start(t, n, agent.Options{}, append([]string{ns, "--features=xlat"}, c.args...)...)
			sendPaced(t, l.a, net.JoinHostPort(svcPod, "4000"), svcVIP, svcDatagrams, c.pace)
			sendPaced(t, l.node, net.JoinHostPort(svcNodeB, "4100"), svcVIP, svcDatagrams, c.pace)
			if got := <-echoed; got != 2*svcDatagrams {
				t.Fatalf("backend answered %d datagrams, want %d", got, 2*svcDatagrams)
			}
			time.Sleep(50 * time.Millisecond)
			counters, err := h.A.DP.ReadCounters()
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "dnat+pods" {
				checkAlias(t, h)
			}
			if c.name == "dnat" || c.name == "dnat+pods" {
				checkHostAlias(t, h)
			}
			flows := h.Stop()
			if strings.HasSuffix(c.name, "map full") && counters[datapath.CounterOverflowRecords] < 4*svcDatagrams {
				t.Errorf("%d packets through the overflow ring, want most of the %d sightings", counters[datapath.CounterOverflowRecords], 4*2*svcDatagrams)
			}
			if strings.HasSuffix(c.name, "flips") {
				if _, _, recs := agenttest.Sum(flows, agenttest.Match{Src: svcPod, Dst: svcVIP, Proto: 17}); len(recs) < 2 {
					t.Errorf("the request in %d records: it crossed no flip", len(recs))
				}
			}

			node, a, b := l.node.Name+"/", l.a.Name+"/", l.b.Name+"/"
			srcAfter, sportAfter := svcPod, uint16(svcClientPort)
			if c.masquerade {
				srcAfter, sportAfter = svcNodeB, 0
			}
			req := want{what: "pod to Service",
				match: agenttest.Match{Src: svcPod, Dst: svcVIP, Sport: svcClientPort, Dport: svcPort, Proto: 17},
				xsrc:  srcAfter, xsport: sportAfter, xdst: svcBackend, xdport: svcTargetPort,
				ifaces: []string{node + "na:ingress", node + "nb:egress"},
				after:  agenttest.Match{Src: srcAfter, Dst: svcBackend, Dport: svcTargetPort, Proto: 17}}
			if !c.masquerade {
				req.after.Sport = svcClientPort
			}
			rep := want{what: "backend's reply",
				match: agenttest.Match{Src: svcBackend, Dst: srcAfter, Sport: svcTargetPort, Dport: sportAfter, Proto: 17},
				xsrc:  svcVIP, xsport: svcPort, xdst: svcPod, xdport: svcClientPort,
				ifaces: []string{node + "nb:ingress", node + "na:egress"},
				after:  agenttest.Match{Src: svcVIP, Dst: svcPod, Sport: svcPort, Dport: svcClientPort, Proto: 17}}
			if c.masquerade {
				rep.match.Dst = svcNodeB
			}
			if c.pods {
				req.ifaces = append([]string{a + "a0:egress"}, append(req.ifaces, b+"b0:ingress")...)
				rep.ifaces = append([]string{b + "b0:egress"}, append(rep.ifaces, a+"a0:ingress")...)
			}
			split, full := c.args != nil, strings.HasSuffix(c.name, "map full")
			req.split, rep.split, req.full, rep.full = split, split, full, full
			check(t, flows, req)
			if c.masquerade {
				// The reply goes to the port masquerade gave the request.
				if _, _, recs := agenttest.Sum(flows, req.match); len(recs) > 0 {
					rep.match.Dport = recs[0].XlatSrcPort
				}
			}
			check(t, flows, rep)

			// The host-network client: DNAT in OUTPUT, before any hook;
			// masquerade leaves its address (already the node's on nb).
			host := want{what: "host-network client to Service",
				match: agenttest.Match{Src: svcNodeB, Dst: svcVIP, Sport: svcHostPort, Dport: svcPort, Proto: 17},
				xsrc:  svcNodeB, xdst: svcBackend, xdport: svcTargetPort,
				ifaces: []string{node + "nb:egress"},
				after:  agenttest.Match{Src: svcNodeB, Dst: svcBackend, Sport: svcHostPort, Dport: svcTargetPort, Proto: 17}}
			hostRep := want{what: "backend's reply to the host",
				match: agenttest.Match{Src: svcBackend, Dst: svcNodeB, Sport: svcTargetPort, Dport: svcHostPort, Proto: 17},
				xsrc:  svcVIP, xsport: svcPort, xdst: svcNodeB, xdport: svcHostPort,
				ifaces: []string{node + "nb:ingress"},
				after:  agenttest.Match{Src: svcVIP, Dst: svcNodeB, Sport: svcPort, Dport: svcHostPort, Proto: 17}}
			if c.pods {
				host.ifaces = append(host.ifaces, b+"b0:ingress")
				hostRep.ifaces = append([]string{b + "b0:egress"}, hostRep.ifaces...)
			}
			host.split, hostRep.split, host.full, hostRep.full = split, split, full, full
			check(t, flows, host)
			check(t, flows, hostRep)
			if t.Failed() {
				for _, f := range flows {
					t.Logf("%s:%d -> %s:%d p%d pk=%d xlat %s:%d -> %s:%d %s", f.SrcAddr, f.SrcPort, f.DstAddr, f.DstPort, f.Proto,
						f.Packets, f.XlatSrcAddr, f.XlatSrcPort, f.XlatDstAddr, f.XlatDstPort, f.Ifaces())
				}
			}
		})
	}
}

// An alias does not survive its connection: once the node's conntrack
// forgets the DNATed connection and the Service's rule is gone, the same
// client socket sends to the backend's address directly, the very tuple
// the DNAT made of its datagrams, in the same generation. Those datagrams
// are a flow of their own, counted once, and the Service's flow keeps
// exactly its own.
func TestServiceAliasEndsWithConnection(t *testing.T) {
	l := newSvcLab(t, false)
	echoed := l.echo(t, svcDatagrams+svcDirect)
	h := agenttest.Start(t, svcAllIfaces, agent.Options{}, "--netns="+l.node.Name+","+l.a.Name+","+l.b.Name, "--features=xlat")
	c, err := netlab.UDPListen(l.a, net.JoinHostPort(svcPod, "4000"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendOn(t, c, &net.UDPAddr{IP: net.ParseIP(svcVIP), Port: svcPort}, svcDatagrams)
	netlab.Run(t, l.node, "nft", "flush chain ip svc pre")
	nh, err := netlab.Handle(l.node)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	if err := nh.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
		t.Fatal(err)
	}
	sendOn(t, c, &net.UDPAddr{IP: net.ParseIP(svcBackend), Port: svcTargetPort}, svcDirect)
	if got := <-echoed; got != svcDatagrams+svcDirect {
		t.Fatalf("backend answered %d datagrams, want %d", got, svcDatagrams+svcDirect)
	}
	time.Sleep(50 * time.Millisecond)
	flows := h.Stop()

	for _, c := range []struct {
		what string
		m    agenttest.Match
		want uint64
		xlat bool
	}{
		{"to the Service", agenttest.Match{Src: svcPod, Dst: svcVIP, Sport: svcClientPort, Dport: svcPort, Proto: 17}, svcDatagrams, true},
		{"to the backend directly", agenttest.Match{Src: svcPod, Dst: svcBackend, Sport: svcClientPort, Dport: svcTargetPort, Proto: 17}, svcDirect, false},
		// Both connections' replies have the same tuple before NAT.
		{"replies", agenttest.Match{Src: svcBackend, Dst: svcPod, Sport: svcTargetPort, Dport: svcClientPort, Proto: 17}, svcDatagrams + svcDirect, true},
		{"replies after NAT", agenttest.Match{Src: svcVIP, Dst: svcPod, Proto: 17}, 0, false},
	} {
		pk, _, recs := agenttest.Sum(flows, c.m)
		t.Logf("%s: %d packets in %d records", c.what, pk, len(recs))
		if pk != c.want {
			t.Errorf("%s: %d packets, want %d", c.what, pk, c.want)
		}
		for _, r := range recs {
			if (r.XlatDstAddr != "") != c.xlat {
				t.Errorf("%s: record with xlat %s:%d -> %s:%d", c.what, r.XlatSrcAddr, r.XlatSrcPort, r.XlatDstAddr, r.XlatDstPort)
			}
			if len(r.Interfaces) != svcAllIfaces {
				t.Errorf("%s: record lists %s, want the %d interfaces of its way", c.what, r.Ifaces(), svcAllIfaces)
			}
		}
	}
	if t.Failed() {
		for _, f := range flows {
			t.Logf("%s:%d -> %s:%d p%d pk=%d xlat %s:%d -> %s:%d %s", f.SrcAddr, f.SrcPort, f.DstAddr, f.DstPort, f.Proto,
				f.Packets, f.XlatSrcAddr, f.XlatSrcPort, f.XlatDstAddr, f.XlatDstPort, f.Ifaces())
		}
	}
}

// IPv6: the pods' datagrams to a ClusterIP and their replies, DNATed by
// the node and watched everywhere, counted once each way, keyed before NAT.
func TestServiceCountedOnceIPv6(t *testing.T) {
	ad := svcV6
	l := newSvcLabOf(t, ad, false)
	echoed := l.echo(t, svcDatagrams)
	h := agenttest.Start(t, svcAllIfaces, agent.Options{}, "--netns="+l.node.Name+","+l.a.Name+","+l.b.Name, "--features=xlat")
	sendTo(t, l.a, net.JoinHostPort(ad.pod, "4000"), ad.vip, svcDatagrams)
	if got := <-echoed; got != svcDatagrams {
		t.Fatalf("backend answered %d datagrams, want %d", got, svcDatagrams)
	}
	time.Sleep(50 * time.Millisecond)
	flows := h.Stop()
	node, a, b := l.node.Name+"/", l.a.Name+"/", l.b.Name+"/"
	check(t, flows, want{what: "pod to Service",
		match: agenttest.Match{Src: ad.pod, Dst: ad.vip, Sport: svcClientPort, Dport: svcPort, Proto: 17},
		xsrc:  ad.pod, xsport: svcClientPort, xdst: ad.backend, xdport: svcTargetPort,
		ifaces: []string{a + "a0:egress", node + "na:ingress", node + "nb:egress", b + "b0:ingress"},
		after:  agenttest.Match{Src: ad.pod, Dst: ad.backend, Proto: 17}})
	check(t, flows, want{what: "backend's reply",
		match: agenttest.Match{Src: ad.backend, Dst: ad.pod, Sport: svcTargetPort, Dport: svcClientPort, Proto: 17},
		xsrc:  ad.vip, xsport: svcPort, xdst: ad.pod, xdport: svcClientPort,
		ifaces: []string{b + "b0:egress", node + "nb:ingress", node + "na:egress", a + "a0:ingress"},
		after:  agenttest.Match{Src: ad.vip, Dst: ad.pod, Proto: 17}})
	if t.Failed() {
		for _, f := range flows {
			t.Logf("%s:%d -> %s:%d p%d pk=%d xlat %s:%d -> %s:%d %s", f.SrcAddr, f.SrcPort, f.DstAddr, f.DstPort, f.Proto,
				f.Packets, f.XlatSrcAddr, f.XlatSrcPort, f.XlatDstAddr, f.XlatDstPort, f.Ifaces())
		}
	}
}

// checkHostAlias: the host-network client's tuple after NAT (node ->
// backend, seen first at the node's egress, certainly first: a local
// socket's) is an alias that counts that hook's packets itself, after the
// first ones in its flow (bpf/xlat.h, xlat_delegate), which the flow's
// FlowFlagXlatVia tells the evictor to add: in the map, alias and flow
// hold every datagram between them, each once; what makes such a packet
// cost one lookup, as a flow's own (docs/design/counting.md).
func checkHostAlias(t *testing.T, h *agenttest.Harness) {
	t.Helper()
	k := datapath.FlowKey{SrcPort: svcHostPort, DstPort: svcTargetPort, Proto: 17}
	k.SrcIp, k.DstIp = netip.MustParseAddr(svcNodeB).As16(), netip.MustParseAddr(svcBackend).As16()
	pre := datapath.FlowKey{SrcPort: svcHostPort, DstPort: svcPort, Proto: 17}
	pre.SrcIp, pre.DstIp = netip.MustParseAddr(svcNodeB).As16(), netip.MustParseAddr(svcVIP).As16()
	for _, m := range h.A.DP.Maps.Flows {
		var a, v datapath.FlowValue
		if m.Lookup(&k, &a) != nil || m.Lookup(&pre, &v) != nil {
			continue
		}
		if a.Flags&datapath.FlowFlagXlatAlias == 0 || a.ListedOnly&1 != 0 || a.Packets == 0 || v.Flags&datapath.FlowFlagXlatVia == 0 {
			t.Errorf("node -> backend: flags %#x, listed_only %#b, %d packets; its flow's flags %#x: want an alias counting, its flow Via",
				a.Flags, a.ListedOnly, a.Packets, v.Flags)
		}
		if a.Packets+v.Packets != svcDatagrams {
			t.Errorf("host-network client: %d packets in the alias + %d in the flow, want %d", a.Packets, v.Packets, svcDatagrams)
		}
		t.Logf("host-network client: %d packets in the alias, %d in the flow", a.Packets, v.Packets)
		return
	}
	t.Error("no map holds both node -> backend's alias and node -> Service's flow")
}

// checkAlias: the request's tuple after NAT (pod -> backend) is an alias in
// the flow map (bpf/xlat.h), with no packets, listing the two hooks after
// NAT that its flow lists as steady (the node's egress toward the backend,
// the backend pod's ingress), so that their packets stop there: what makes
// a post-NAT packet at a listed hook cost no lookup more
// (docs/design/counting.md, The alias in the flow map).
func checkAlias(t *testing.T, h *agenttest.Harness) {
	t.Helper()
	k := datapath.FlowKey{SrcPort: svcClientPort, DstPort: svcTargetPort, Proto: 17}
	pod, backend := netip.MustParseAddr(svcPod).As16(), netip.MustParseAddr(svcBackend).As16()
	k.SrcIp, k.DstIp = pod, backend
	// Either generation's map (the other may have flipped in at the end of
	// the traffic, before the alias's second packet at each hook).
	found := false
	for _, m := range h.A.DP.Maps.Flows {
		var v datapath.FlowValue
		if m.Lookup(&k, &v) != nil {
			continue
		}
		found = true
		if v.Flags&datapath.FlowFlagXlatAlias == 0 || v.Packets != 0 || v.Bytes != 0 {
			t.Errorf("pod -> backend in the flow map: flags %#x, %d packets, %d bytes; want an alias with none", v.Flags, v.Packets, v.Bytes)
		}
		if v.N_ifaces == 3 && v.ListedOnly == 0b111 {
			t.Logf("alias pod -> backend: flags %#x, %d hooks after NAT listed", v.Flags, v.N_ifaces-1)
			return
		}
		t.Logf("alias pod -> backend with %d entries (listed_only %#b)", v.N_ifaces, v.ListedOnly)
	}
	if found {
		t.Error("no alias lists its zero entry and the 2 hooks after NAT")
		return
	}
	t.Error("no alias pod -> backend in the flow maps")
}

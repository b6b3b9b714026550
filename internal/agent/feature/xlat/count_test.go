package xlat_test

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/flowlens/flowlens/internal/agent"
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

func newSvcLab(t *testing.T, masquerade bool) *svcLab {
	l := &svcLab{a: netlab.NewNetns(t, "a"), node: netlab.NewNetns(t, "node"), b: netlab.NewNetns(t, "b")}
	for _, ns := range []*netlab.Netns{l.a, l.node, l.b} {
		netlab.Quiet(t, ns)
	}
	if err := netlab.Sysctl(l.node, "net.ipv4.ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	a0, na := netlab.Veth(t, l.a, "a0", l.node, "na")
	nb, b0 := netlab.Veth(t, l.node, "nb", l.b, "b0")
	netlab.AddAddr(t, l.a, "a0", svcPod+"/24")
	netlab.AddAddr(t, l.node, "na", svcNodeA+"/24")
	netlab.AddAddr(t, l.node, "nb", svcNodeB+"/24")
	netlab.AddAddr(t, l.b, "b0", svcBackend+"/24")
	netlab.Neigh(t, l.a, "a0", svcNodeA, na.Attrs().HardwareAddr)
	netlab.Neigh(t, l.node, "na", svcPod, a0.Attrs().HardwareAddr)
	netlab.Neigh(t, l.node, "nb", svcBackend, b0.Attrs().HardwareAddr)
	netlab.Neigh(t, l.b, "b0", svcNodeB, nb.Attrs().HardwareAddr)
	netlab.Route(t, l.a, "10.213.0.0/16", svcNodeA, "a0")
	netlab.Route(t, l.b, "10.213.0.0/16", svcNodeB, "b0")
	// The node reaches the Service range through nb (its source: svcNodeB).
	netlab.Route(t, l.node, "10.213.9.0/24", svcBackend, "nb")
	nft := func(rule string) { netlab.Run(t, l.node, "nft", rule) }
	nft("add table ip svc")
	nft("add chain ip svc pre { type nat hook prerouting priority dstnat; }")
	nft("add chain ip svc out { type nat hook output priority -100; }")
	for _, c := range []string{"pre", "out"} {
		nft("add rule ip svc " + c + " ip daddr " + svcVIP + " udp dport 80 dnat to " + svcBackend + ":8080")
	}
	if masquerade {
		nft("add chain ip svc post { type nat hook postrouting priority srcnat; }")
		nft("add rule ip svc post oifname nb masquerade")
	}
	return l
}

// echo answers every datagram the backend receives, n of them, and reports
// how many it answered.
func (l *svcLab) echo(t *testing.T, n int) <-chan int {
	c, err := netlab.UDPListen(l.b, net.JoinHostPort(svcBackend, "8080"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	done := make(chan int, 1)
	go func() {
		buf := make([]byte, 2048)
		answered := 0
		for answered < n {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
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
func send(t *testing.T, ns *netlab.Netns, src string, n int) {
	t.Helper()
	c, err := netlab.UDPListen(ns, src)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendOn(t, c, &net.UDPAddr{IP: net.ParseIP(svcVIP), Port: svcPort}, n)
}

// sendOn sends n datagrams on c to ra, reading each reply (which must come
// from ra).
func sendOn(t *testing.T, c *net.UDPConn, ra *net.UDPAddr, n int) {
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
}

func check(t *testing.T, flows []agenttest.JSONFlow, w want) {
	t.Helper()
	pk, _, recs := agenttest.Sum(flows, w.match)
	if pk != svcDatagrams {
		t.Errorf("%s: the records of %+v sum to %d packets, want %d", w.what, w.match, pk, svcDatagrams)
	}
	for _, r := range recs {
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
	}{
		{"dnat", false, false},
		{"dnat+pods", false, true},
		{"dnat+masquerade", true, false},
		{"dnat+masquerade+pods", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newSvcLab(t, c.masquerade)
			echoed := l.echo(t, 2*svcDatagrams)
			ns, n := "--netns="+l.node.Name, svcWantIfaces
			if c.pods {
				ns, n = ns+","+l.a.Name+","+l.b.Name, svcAllIfaces
			}
			h := agenttest.Start(t, n, agent.Options{}, ns, "--features=xlat")
			send(t, l.a, net.JoinHostPort(svcPod, "4000"), svcDatagrams)
			send(t, l.node, net.JoinHostPort(svcNodeB, "4100"), svcDatagrams)
			if got := <-echoed; got != 2*svcDatagrams {
				t.Fatalf("backend answered %d datagrams, want %d", got, 2*svcDatagrams)
			}
			time.Sleep(50 * time.Millisecond)
			flows := h.Stop()

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

package agent_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// overlayLab is two "nodes" joined by an uplink veth, a VXLAN tunnel
// (VNI 42, UDP 4789) over it, and a "pod" behind a veth on each node, as
// flannel or Calico VXLAN wire a cluster:
//
//	pod1 (10.78.1.2) eth0 | pv1 -- node1 -- vx1 ~~ u1 | u2 ~~ vx2 -- node2 -- pv2 | eth0 pod2 (10.78.2.2)
//	uplink 192.168.78.1 <-> 192.168.78.2, tunnel 10.78.0.1 <-> 10.78.0.2
//
// IPv6 is off and every neighbour (pods' gateways, nodes' pods, the
// tunnel peers, the uplink peers) is pinned, so the only packets any link
// carries are the test's datagrams.
type overlayLab struct {
	node1, node2, pod1, pod2 *netlab.Netns
}

const (
	ovlPod1, ovlPod2   = "10.78.1.2", "10.78.2.2"
	ovlNode1, ovlNode2 = "192.168.78.1", "192.168.78.2"
	ovlVNI             = 42
)

func newOverlayLab(t *testing.T) *overlayLab {
	t.Helper()
	l := &overlayLab{node1: netlab.NewNetns(t, "node1"), node2: netlab.NewNetns(t, "node2"),
		pod1: netlab.NewNetns(t, "pod1"), pod2: netlab.NewNetns(t, "pod2")}
	for _, ns := range []*netlab.Netns{l.node1, l.node2, l.pod1, l.pod2} {
		netlab.Quiet(t, ns)
	}
	for _, ns := range []*netlab.Netns{l.node1, l.node2} {
		if err := netlab.Sysctl(ns, "net.ipv4.ip_forward", "1"); err != nil {
			t.Fatal(err)
		}
	}
	u1, u2 := netlab.Veth(t, l.node1, "u1", l.node2, "u2")
	netlab.AddAddr(t, l.node1, "u1", ovlNode1+"/24")
	netlab.AddAddr(t, l.node2, "u2", ovlNode2+"/24")
	netlab.Neigh(t, l.node1, "u1", ovlNode2, u2.Attrs().HardwareAddr)
	netlab.Neigh(t, l.node2, "u2", ovlNode1, u1.Attrs().HardwareAddr)

	vx := func(ns *netlab.Netns, name, local, remote, dev, addr string) net.HardwareAddr {
		netlab.Run(t, ns, "ip", "link", "add", name, "type", "vxlan", "id", fmt.Sprint(ovlVNI),
			"local", local, "remote", remote, "dstport", "4789", "dev", dev)
		netlab.Run(t, ns, "ip", "link", "set", name, "up")
		netlab.AddAddr(t, ns, name, addr)
		h, err := netlab.Handle(ns)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		lk, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return lk.Attrs().HardwareAddr
	}
	mac1 := vx(l.node1, "vx1", ovlNode1, ovlNode2, "u1", "10.78.0.1/24")
	mac2 := vx(l.node2, "vx2", ovlNode2, ovlNode1, "u2", "10.78.0.2/24")
	netlab.Neigh(t, l.node1, "vx1", "10.78.0.2", mac2)
	netlab.Neigh(t, l.node2, "vx2", "10.78.0.1", mac1)

	pod := func(node, pod *netlab.Netns, pv, podIP, gw, peerNet, peerTun, vxName string) {
		e, p := netlab.Veth(t, pod, "eth0", node, pv)
		netlab.AddAddr(t, pod, "eth0", podIP+"/24")
		netlab.AddAddr(t, node, pv, gw+"/24")
		netlab.Neigh(t, pod, "eth0", gw, p.Attrs().HardwareAddr)
		netlab.Neigh(t, node, pv, podIP, e.Attrs().HardwareAddr)
		netlab.Route(t, pod, "0.0.0.0/0", gw, "eth0")
		netlab.Route(t, node, peerNet, peerTun, vxName)
	}
	pod(l.node1, l.pod1, "pv1", ovlPod1, "10.78.1.1", "10.78.2.0/24", "10.78.0.2", "vx1")
	pod(l.node2, l.pod2, "pv2", ovlPod2, "10.78.2.1", "10.78.1.0/24", "10.78.0.1", "vx2")
	return l
}

// ifaceCounts are an interface's packets, each way, per the kernel.
type ifaceCounts struct{ rx, tx uint64 }

func (l *overlayLab) counters(t *testing.T) map[string]ifaceCounts {
	t.Helper()
	out := map[string]ifaceCounts{}
	for _, x := range []struct {
		ns   *netlab.Netns
		name string
	}{{l.node1, "pv1"}, {l.node1, "vx1"}, {l.node1, "u1"}, {l.node2, "u2"}, {l.node2, "vx2"}, {l.node2, "pv2"}} {
		s, err := netlab.ReadLinkStats(x.ns, x.name)
		if err != nil {
			t.Fatal(err)
		}
		out[x.name] = ifaceCounts{s.RxPackets, s.TxPackets}
	}
	return out
}

// A pod's datagrams through a VXLAN tunnel are one flow, counted once,
// whichever nodes the agent watches: the inner flow's packets are exactly
// the datagrams sent, it lists every watched interface the packets crossed
// (pod veth, vxlan device and uplink, on each watched node), it carries the
// tunnel's outer endpoints and VNI, and no node-to-node UDP 4789 flow is
// recorded. Per interface and direction, the packets of the flows listing
// it equal the kernel's counters of what it carried.
func TestOverlayVXLANCountedOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		watch  func(l *overlayLab) string
		ifaces []string // the inner flow's interfaces in the record's order: the counting one first
		perNS  bool     // one program set per namespace (the fallback), not the shared set
	}{
		{"both nodes", func(l *overlayLab) string { return l.node1.Name + "," + l.node2.Name },
			[]string{"node1/pv1:ingress", "node1/vx1:egress", "node1/u1:egress", "node2/u2:ingress", "node2/vx2:ingress", "node2/pv2:egress"}, false},
		{"sending node", func(l *overlayLab) string { return l.node1.Name },
			[]string{"node1/pv1:ingress", "node1/vx1:egress", "node1/u1:egress"}, false},
		// The uplink's ingress counts; the vxlan device's ingress, after
		// decapsulation, does not count again (bpf/order.h).
		{"receiving node", func(l *overlayLab) string { return l.node2.Name },
			[]string{"node2/u2:ingress", "node2/vx2:ingress", "node2/pv2:egress"}, false},
		{"both nodes, one program set per namespace", func(l *overlayLab) string { return l.node1.Name + "," + l.node2.Name },
			[]string{"node1/pv1:ingress", "node1/vx1:egress", "node1/u1:egress", "node2/u2:ingress", "node2/vx2:ingress", "node2/pv2:egress"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newOverlayLab(t)
			const n, payload = 200, 100
			recv := agenttest.MustListen(t, l.pod2, ovlPod2+":6000")
			if err := recv.SetReadBuffer(8 << 20); err != nil {
				t.Fatal(err)
			}
			got := countUDP(t, recv)
			h := agenttest.Start(t, len(tc.ifaces), agent.Options{ForcePerNamespacePrograms: tc.perNS}, "--netns="+tc.watch(l))
			before := l.counters(t)
			if err := netlab.UDPSend(l.pod1, ovlPod1+":5000", ovlPod2+":6000", make([]byte, payload), n); err != nil {
				t.Fatal(err)
			}
			if c := got.wait(n); c != n {
				t.Fatalf("pod2 received %d datagrams, want %d", c, n)
			}
			after := l.counters(t)
			flows := h.Stop()

			pkts, _, recs := agenttest.Sum(flows, agenttest.Match{Src: ovlPod1, Dst: ovlPod2, Sport: 5000, Dport: 6000, Proto: 17})
			if pkts != n {
				t.Fatalf("inner flow: %d packets, want %d (records %+v)", pkts, n, recs)
			}
			for _, r := range recs {
				if got := netnsLess(r.Ifaces(), l); got != strings.Join(tc.ifaces, " ") {
					t.Errorf("inner flow lists %s, want %s", got, strings.Join(tc.ifaces, " "))
				}
				if r.TunnelType != "vxlan" || r.TunnelSrcAddr != ovlNode1 || r.TunnelDstAddr != ovlNode2 || r.TunnelVNI != ovlVNI {
					t.Errorf("inner flow's tunnel: %q %s -> %s vni %d, want vxlan %s -> %s vni %d",
						r.TunnelType, r.TunnelSrcAddr, r.TunnelDstAddr, r.TunnelVNI, ovlNode1, ovlNode2, ovlVNI)
				}
			}
			if p, _, outer := agenttest.Sum(flows, agenttest.Match{Dport: 4789, Proto: 17}); len(outer) != 0 {
				t.Errorf("a node-to-node UDP 4789 flow was recorded (%d packets): %+v", p, outer)
			}
			// Per interface: the flows listing it, against the kernel.
			var total uint64
			for _, f := range flows {
				total += f.Packets
			}
			if total != n {
				t.Errorf("all flows: %d packets, want %d (only the test's datagrams cross the lab)", total, n)
			}
			for name := range after {
				var rx, tx uint64
				listed := false
				for _, f := range flows {
					for _, it := range f.Interfaces {
						if it.Name != name {
							continue
						}
						listed = true
						if it.Direction == "ingress" || it.Direction == "both" {
							rx += f.Packets
						}
						if it.Direction == "egress" || it.Direction == "both" {
							tx += f.Packets
						}
					}
				}
				if !listed {
					continue // not watched in this case
				}
				k := ifaceCounts{after[name].rx - before[name].rx, after[name].tx - before[name].tx}
				if rx != k.rx || tx != k.tx {
					t.Errorf("%s: flows listing it carry rx %d tx %d packets, the kernel counted rx %d tx %d", name, rx, tx, k.rx, k.tx)
				} else {
					t.Logf("%s: rx %d tx %d packets, as the kernel counted", name, rx, tx)
				}
			}
		})
	}
}

// netnsLess rewrites the lab's namespace names (fltest-...-node1-xxxx) in
// an interface list to node1, node2.
func netnsLess(s string, l *overlayLab) string {
	return strings.NewReplacer(l.node1.Name, "node1", l.node2.Name, "node2").Replace(s)
}

// Geneve and IP-in-IP, whose devices this kernel may not have (no geneve
// or ipip link type here): hand-built encapsulated frames sent through a
// veth with an AF_PACKET socket. Each kind's frames are one inner flow with
// exactly the frames sent, listing both ends of the veth, with the tunnel's
// type, outer endpoints and VNI, and the receiver's drops of them (it has
// no such tunnel); no record, not even a partial one, holds them under
// their outer key.
// Per interface and direction, the flows listing it carry what the kernel
// counted (the receiver's ICMP errors included, in flows of their own).
func TestOverlayHandBuiltFrames(t *testing.T) {
	p := agenttest.NewPair(t)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg())
	hd, err := netlab.Handle(p.A)
	if err != nil {
		t.Fatal(err)
	}
	la, err := hd.LinkByName(p.IfA)
	hd.Close()
	if err != nil {
		t.Fatal(err)
	}
	hb, err := netlab.Handle(p.B)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := hb.LinkByName(p.IfB)
	hb.Close()
	if err != nil {
		t.Fatal(err)
	}
	var dst, src packet.MAC
	copy(dst[:], lb.Attrs().HardwareAddr)
	copy(src[:], la.Attrs().HardwareAddr)
	eth := func(typ uint16) []byte { return packet.Eth(typ, packet.MACs(dst, src)) }
	inner4 := func(sport uint16) []byte {
		return packet.Cat(packet.IPv4(packet.ProtoUDP, "10.79.1.2", "10.79.2.2", 8+32), packet.UDP(sport, 5000, 32))
	}
	inner6 := packet.Cat(packet.IPv6(packet.ProtoUDP, "fd79::1:2", "fd79::2:2", 8+32), packet.UDP(40003, 5000, 32))
	geneve := packet.Cat([]byte{1, 0, 0x65, 0x58, 0, 0, 7, 0, 0, 0, 0, 0}, packet.Eth(packet.EtherTypeIPv4), inner4(40001))
	kinds := []struct {
		name, src, dst string
		sport          uint16
		frame          []byte
		typ            string
		vni            uint32
	}{
		{"geneve", "10.79.1.2", "10.79.2.2", 40001, packet.Cat(eth(packet.EtherTypeIPv4),
			packet.IPv4(packet.ProtoUDP, p.IPA, p.IPB, 8+len(geneve), packet.Checksum()), packet.UDP(51000, 6081, len(geneve))[:packet.UDPLen], geneve), "geneve", 7},
		{"ipip", "10.79.1.2", "10.79.2.2", 40002, packet.Cat(eth(packet.EtherTypeIPv4),
			packet.IPv4(4, p.IPA, p.IPB, len(inner4(40002)), packet.Checksum()), inner4(40002)), "ipip", 0},
		{"sit", "fd79::1:2", "fd79::2:2", 40003, packet.Cat(eth(packet.EtherTypeIPv4),
			packet.IPv4(41, p.IPA, p.IPB, len(inner6), packet.Checksum()), inner6), "ipip", 0},
	}
	const n = 50
	// stats reads both ends' link counters.
	stats := func() map[string]netlab.Stats {
		out := map[string]netlab.Stats{}
		for _, x := range []struct {
			ns  *netlab.Netns
			ifn string
		}{{p.A, p.IfA}, {p.B, p.IfB}} {
			s, err := netlab.ReadLinkStats(x.ns, x.ifn)
			if err != nil {
				t.Fatal(err)
			}
			out[x.ifn] = s
		}
		return out
	}
	before := stats()
	for _, k := range kinds {
		frames := make([][]byte, n)
		for i := range frames {
			frames[i] = k.frame
		}
		wireSendFrames(t, p.A, la.Attrs().Index, frames)
	}
	time.Sleep(200 * time.Millisecond) // the receiver's ICMP errors
	after := stats()
	flows := h.Stop()
	for _, k := range kinds {
		pkts, _, recs := agenttest.Sum(flows, agenttest.Match{Src: k.src, Dst: k.dst, Sport: k.sport, Dport: 5000, Proto: 17})
		if pkts != n {
			t.Errorf("%s: inner flow has %d packets, want %d (%+v)", k.name, pkts, n, recs)
			continue
		}
		var drops uint64
		causes := map[string]bool{}
		for _, r := range recs {
			drops += r.DropPackets
			causes[r.DropCause] = true
		}
		// The receiver has no such tunnel: it drops every frame, and the
		// drop hook reads through too, so the drops are the inner flow's.
		t.Logf("%s: %d packets, %d dropped (%v)", k.name, pkts, drops, causes)
		if drops != n {
			t.Errorf("%s: inner flow has %d drops, want %d", k.name, drops, n)
		}
		for _, r := range recs {
			want := p.A.Name + "/" + p.IfA + ":egress " + p.B.Name + "/" + p.IfB + ":ingress"
			if r.Ifaces() != want || r.TunnelType != k.typ || r.TunnelSrcAddr != p.IPA || r.TunnelDstAddr != p.IPB || r.TunnelVNI != k.vni {
				t.Errorf("%s: %s tunnel %q %s -> %s vni %d; want %s, %s %s -> %s vni %d", k.name, r.Ifaces(),
					r.TunnelType, r.TunnelSrcAddr, r.TunnelDstAddr, r.TunnelVNI, want, k.typ, p.IPA, p.IPB, k.vni)
			}
		}
	}
	for _, f := range flows {
		if f.SrcAddr == p.IPA && (f.Proto == 4 || f.Proto == 41 || f.DstPort == 6081) {
			t.Errorf("a flow on the outer key: %+v", f)
		}
	}
	for name, s := range after {
		var rx, tx uint64
		for _, f := range flows {
			for _, it := range f.Interfaces {
				if it.Name == name && (it.Direction == "ingress" || it.Direction == "both") {
					rx += f.Packets
				}
				if it.Name == name && (it.Direction == "egress" || it.Direction == "both") {
					tx += f.Packets
				}
			}
		}
		if krx, ktx := s.RxPackets-before[name].RxPackets, s.TxPackets-before[name].TxPackets; rx != krx || tx != ktx {
			t.Errorf("%s: flows listing it carry rx %d tx %d, the kernel counted rx %d tx %d", name, rx, tx, krx, ktx)
		} else {
			t.Logf("%s: rx %d tx %d packets, as the kernel counted", name, rx, tx)
		}
	}
}

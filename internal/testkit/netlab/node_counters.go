package netlab

import (
	"fmt"
	"maps"
	"time"
)

// NodeCounters are the kernel's counters of a NodeLab at one moment: each
// watched interface's and pod c1's (IFLA_STATS64), and per namespace what
// nstat says of the GSO buffers its IP layer received.
type NodeCounters struct {
	Links map[string]Stats // by NodeIface.Key
	// extraSegs, per namespace name: IpExtIn{NoECT,ECT0,ECT1,CE}Pkts,
	// which count a GSO buffer as its segments, minus IpInReceives,
	// which counts it once: the segments beyond the first of every GSO
	// buffer the namespace received.
	extraSegs map[string]uint64
	// nodeUDPOut is node A's Udp OutDatagrams: what its own sockets sent
	// (VXLAN's encapsulation does not count there).
	nodeUDPOut uint64
}

// NodeSent is how many datagrams node A's own sockets (host network) sent
// between before and after, as nstat's UdpOutDatagrams says.
func (l *NodeLab) NodeSent(before, after NodeCounters) uint64 {
	return after.nodeUDPOut - before.nodeUDPOut
}

// c1Iface is pod c1's interface: on node B, not watched, but it says what
// c1 sent.
func (l *NodeLab) c1Iface() NodeIface { return NodeIface{l.C1, "nb-eth0", FramingEth} }

// ReadCounters reads the lab's counters.
func (l *NodeLab) ReadCounters(t T) NodeCounters {
	t.Helper()
	c := NodeCounters{Links: map[string]Stats{}, extraSegs: map[string]uint64{}}
	for _, i := range append(l.Watched(), l.c1Iface()) {
		s, err := ReadLinkStats(i.Ns, i.Name)
		if err != nil {
			t.Fatal(err)
		}
		c.Links[i.Key()] = s
	}
	c.nodeUDPOut = NetCounters(t, l.NodeA, "snmp", "Udp:")["OutDatagrams"]
	for _, ns := range []*Netns{l.NodeA, l.B1} {
		ip := NetCounters(t, ns, "snmp", "Ip:")
		ext := NetCounters(t, ns, "netstat", "IpExt:")
		c.extraSegs[ns.Name] = ext["InNoECTPkts"] + ext["InECT0Pkts"] + ext["InECT1Pkts"] + ext["InCEPkts"] - ip["InReceives"]
	}
	return c
}

// Settle reads the lab's counters until two reads 100 ms apart agree (at
// most 5 s): then the traffic, acknowledgements included, is over.
func (l *NodeLab) Settle(t T) NodeCounters {
	t.Helper()
	prev := l.ReadCounters(t)
	for deadline := time.Now().Add(5 * time.Second); ; {
		time.Sleep(100 * time.Millisecond)
		c := l.ReadCounters(t)
		if maps.Equal(c.Links, prev.Links) && maps.Equal(c.extraSegs, prev.extraSegs) && c.nodeUDPOut == prev.nodeUDPOut {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("netlab: node lab: counters still moving after 5s: %v", c.Links)
		}
		prev = c
	}
}

// Wire is what an interface carried each way as the wire did: a GSO
// buffer as its segments, each with its own headers (docs/design/counting.md).
type Wire struct {
	RxPackets, RxBytes, TxPackets, TxBytes uint64
}

// WireHeader is the headers each segment of the bulk transfer repeats:
// Ethernet, IPv4 and TCP with the timestamps option.
const WireHeader = 14 + 20 + 32

// Wire returns what each interface (by NodeIface.Key, pod c1's included)
// carried between before and after, in wire packets and bytes, and gso,
// the segments beyond the first of the lab's GSO buffers. The interface
// counters count a GSO buffer once, its headers once. The bulk TCP
// transfer a1 → b1 is the lab's only source of GSO buffers, and a GSO
// buffer crosses node A unchanged (same MTU everywhere), so gso, which
// pod b1's nstat gives, is added to each interface of the transfer's
// path (a1's nb-eth0 out, nb-a1 in, nb-b1 out, b1's nb-eth0 in), with
// WireHeader bytes each. Node A's nstat must say the same: if it does not,
// a GSO buffer went elsewhere and the figures would be wrong, so Wire
// fails t.
func (l *NodeLab) Wire(t T, before, after NodeCounters) (wire map[string]Wire, gso uint64) {
	t.Helper()
	gso = after.extraSegs[l.B1.Name] - before.extraSegs[l.B1.Name]
	if node := after.extraSegs[l.NodeA.Name] - before.extraSegs[l.NodeA.Name]; node != gso {
		t.Fatalf("netlab: node lab: pod b1 received GSO buffers of %d extra segments, node A forwarded %d: "+
			"GSO traffic took another path than a1 → b1", gso, node)
	}
	wire = map[string]Wire{}
	for k, a := range after.Links {
		b := before.Links[k]
		wire[k] = Wire{a.RxPackets - b.RxPackets, a.RxBytes - b.RxBytes, a.TxPackets - b.TxPackets, a.TxBytes - b.TxBytes}
	}
	add := func(i NodeIface, rx bool) {
		w, ok := wire[i.Key()]
		if !ok {
			panic(fmt.Sprintf("netlab: no counters for %s", i.Key()))
		}
		if rx {
			w.RxPackets, w.RxBytes = w.RxPackets+gso, w.RxBytes+gso*WireHeader
		} else {
			w.TxPackets, w.TxBytes = w.TxPackets+gso, w.TxBytes+gso*WireHeader
		}
		wire[i.Key()] = w
	}
	add(NodeIface{Ns: l.A1, Name: "nb-eth0"}, false)
	add(NodeIface{Ns: l.NodeA, Name: "nb-a1"}, true)
	add(NodeIface{Ns: l.NodeA, Name: "nb-b1"}, false)
	add(NodeIface{Ns: l.B1, Name: "nb-eth0"}, true)
	return wire, gso
}

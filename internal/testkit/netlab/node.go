package netlab

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// NodeLab is the node-balance lab (issue #29): one Kubernetes-like node
// whose every packet a test can account for against the kernel's own
// counters, with the cases that make sums over flows go wrong: a Service
// DNAT, a VXLAN overlay to a second node, a tun device, a bulk TCP transfer
// (GSO), fragmented UDP, dropped packets and packets no flow can hold.
//
//	pod a1 alpha 10.231.5.1 ─ nb-a1 ┐                       ┌ nb-c1 ─ pod c1 gamma 10.231.7.3
//	pod a2 alpha 10.231.5.2 ─ nb-a2 ┤ node A                │ node B
//	pod b1 beta  10.231.6.2 ─ nb-b1 ┤ nb-vx (VXLAN 42) ═════╡ nb-vx
//	pod b2 beta  10.231.6.3 ─ nb-b2 ┤ nb-up 192.168.231.1 ──┴ nb-up 192.168.231.2
//	client 10.231.8.1 ═ nb-tun (tun)┘ host-network client 192.168.231.1
//
// Node A and its pods live in Dir, a netns directory of their own: an agent
// run with --netns all --netns-dir Dir --interfaces /^nb-/ watches exactly
// them (Watched). Node B and its pod are under DefaultDir: the second node,
// which its own agent would watch. Every pod's interface is nb-eth0 with a
// /32 address behind a static gateway, as CNI plugins do; every neighbour
// is static and IPv6 is off, so no ARP, NDP or MLD packet adds to the
// counts. Node A routes between its pods, DNATs the Service 10.0.0.77:80
// (UDP) to b1:8080 in nftables prerouting and output chains as kube-proxy
// does (output: the node's own, host-network clients), and drops UDP to
// port 9999 in its forward chain.
//
// Traffic sends the lab's traffic; ReadCounters and Wire turn the kernel's
// counters into the wire packets and bytes each interface carried. The
// node-balance test (test/pipeline) and any benchmark that wants the same
// node build it with NewNodeLab.
type NodeLab struct {
	Dir                   string // node A's netns directory (--netns-dir)
	NodeA, A1, A2, B1, B2 *Netns
	NodeB, C1             *Netns // the second node, under DefaultDir
	tun                   *os.File
	upA                   net.HardwareAddr // node A's uplink MAC
}

// The lab's addresses. ServiceIP is inside envtest's default Service range
// (10.0.0.0/24), so a test can create the Service with that ClusterIP.
const (
	NodeA1IP    = "10.231.5.1"
	NodeA2IP    = "10.231.5.2"
	NodeB1IP    = "10.231.6.2"
	NodeB2IP    = "10.231.6.3"
	NodeC1IP    = "10.231.7.3"
	NodeExtIP   = "10.231.8.1" // the client behind nb-tun
	NodeAUpIP   = "192.168.231.1"
	NodeBUpIP   = "192.168.231.2"
	ServiceIP   = "10.0.0.77"
	ServicePort = 80
	BackendPort = 8080
	DropPort    = 9999
	// The unreadable packets written into nb-tun go from and to addresses
	// of no one (no route), so a flow that holds them is told apart.
	JunkSrcIP  = "10.231.9.1"
	JunkDstIP  = "10.231.9.2"
	JunkSrcIP6 = "fd31::9:1"
	JunkDstIP6 = "fd31::9:2"
	// NodeSubnet holds both nodes' uplink addresses, NodeExtSubnet the tun's
	// client: the collector's subnet labels for the lab's non-pod ends.
	NodeSubnet    = "192.168.231.0/24"
	NodeExtSubnet = "10.231.8.0/24"
)

// tunnel addresses of the nodes' VXLAN devices, and the pods' gateway.
const (
	vxA   = "10.231.254.1"
	vxB   = "10.231.254.2"
	podGW = "10.231.255.1"
)

// Framing says what one packet looks like on an interface: the same
// packet has the same size on interfaces of the same framing.
type Framing string

const (
	FramingEth Framing = "eth" // an Ethernet frame (veth)
	FramingIP  Framing = "ip"  // a bare IP packet (tun)
	// FramingVXLAN is the VXLAN device: the packet is an Ethernet frame
	// there too (what flowlens counts), but the driver's counters count
	// it from the inner IP header, 14 bytes less than on a veth.
	FramingVXLAN Framing = "vxlan"
	// FramingOuter is the uplink, where pod traffic to node B is inside
	// VXLAN: 50 bytes more than on the pods' veths.
	FramingOuter Framing = "outer"
)

// NodeIface is one interface of the lab.
type NodeIface struct {
	Ns      *Netns
	Name    string
	Framing Framing
}

// Key is "<netns>/<name>", as a flow lists it.
func (i NodeIface) Key() string { return i.Ns.Name + "/" + i.Name }

// NewNodeLab builds the lab; everything goes when the test (or Script) ends.
// dir is node A's netns directory (a t.TempDir()).
func NewNodeLab(t T, dir string) *NodeLab {
	t.Helper()
	Require(t)
	l := &NodeLab{Dir: dir}
	l.NodeA = NewNetnsIn(t, dir, "nodea")
	l.A1, l.A2 = NewNetnsIn(t, dir, "pod-a1"), NewNetnsIn(t, dir, "pod-a2")
	l.B1, l.B2 = NewNetnsIn(t, dir, "pod-b1"), NewNetnsIn(t, dir, "pod-b2")
	l.NodeB, l.C1 = NewNetns(t, "nodeb"), NewNetns(t, "pod-c1")
	for _, ns := range []*Netns{l.NodeA, l.A1, l.A2, l.B1, l.B2, l.NodeB, l.C1} {
		Quiet(t, ns)
		// Timestamps on, whatever the defaults: the bulk transfer's
		// segments carry a 32-byte TCP header (WireHeader).
		mustSysctl(t, ns, "net.ipv4.tcp_timestamps", "1")
	}
	for _, ns := range []*Netns{l.NodeA, l.NodeB} {
		mustSysctl(t, ns, "net.ipv4.ip_forward", "1")
	}

	// Pods, behind a static gateway on their node's veth.
	l.pod(t, l.NodeA, "nb-a1", l.A1, NodeA1IP)
	l.pod(t, l.NodeA, "nb-a2", l.A2, NodeA2IP)
	l.pod(t, l.NodeA, "nb-b1", l.B1, NodeB1IP)
	l.pod(t, l.NodeA, "nb-b2", l.B2, NodeB2IP)
	l.pod(t, l.NodeB, "nb-c1", l.C1, NodeC1IP)

	// The uplink, and VXLAN over it.
	upA, upB := Veth(t, l.NodeA, "nb-up", l.NodeB, "nb-up")
	l.upA = upA.Attrs().HardwareAddr
	AddAddr(t, l.NodeA, "nb-up", NodeAUpIP+"/24")
	AddAddr(t, l.NodeB, "nb-up", NodeBUpIP+"/24")
	Neigh(t, l.NodeA, "nb-up", NodeBUpIP, upB.Attrs().HardwareAddr)
	Neigh(t, l.NodeB, "nb-up", NodeAUpIP, upA.Attrs().HardwareAddr)
	vxlA := vxlan(t, l.NodeA, NodeAUpIP, NodeBUpIP, vxA)
	vxlB := vxlan(t, l.NodeB, NodeBUpIP, NodeAUpIP, vxB)
	Neigh(t, l.NodeA, "nb-vx", vxB, vxlB)
	Neigh(t, l.NodeB, "nb-vx", vxA, vxlA)
	Run(t, l.NodeA, "ip", "route", "add", "10.231.7.0/24", "via", vxB, "dev", "nb-vx")
	Run(t, l.NodeB, "ip", "route", "add", "10.231.5.0/24", "via", vxA, "dev", "nb-vx")

	// The Service range is routed to the network, as a node's default
	// route would: the node's own clients need a route to the ClusterIP
	// before output's DNAT reroutes their packets to the backend.
	Run(t, l.NodeA, "ip", "route", "add", "10.0.0.0/24", "via", NodeBUpIP, "dev", "nb-up")

	// The tun device and its client's route.
	l.tun, _ = Tun(t, l.NodeA, "nb-tun")
	Run(t, l.NodeA, "ip", "route", "add", NodeExtSubnet, "dev", "nb-tun")

	// The Service, as kube-proxy's nftables mode writes it, and a firewall
	// drop.
	for _, cmd := range []string{
		"add table ip nblab",
		"add chain ip nblab pre { type nat hook prerouting priority dstnat; }",
		fmt.Sprintf("add rule ip nblab pre ip daddr %s udp dport %d dnat to %s:%d", ServiceIP, ServicePort, NodeB1IP, BackendPort),
		// The node's own clients (host network) are translated in output,
		// before any TC hook sees their packets.
		"add chain ip nblab local { type nat hook output priority -100; }",
		fmt.Sprintf("add rule ip nblab local ip daddr %s udp dport %d dnat to %s:%d", ServiceIP, ServicePort, NodeB1IP, BackendPort),
		"add chain ip nblab filt { type filter hook forward priority filter; }",
		fmt.Sprintf("add rule ip nblab filt udp dport %d drop", DropPort),
	} {
		Run(t, l.NodeA, "nft", strings.Fields(cmd)...)
	}
	return l
}

// pod joins ns to node by a veth (node side nodeIf, pod side nb-eth0):
// the pod has ip/32 and a default route via a static gateway whose MAC is
// the node side's; the node routes ip to the veth with a static neighbour.
func (l *NodeLab) pod(t T, node *Netns, nodeIf string, ns *Netns, ip string) {
	t.Helper()
	n, p := Veth(t, node, nodeIf, ns, "nb-eth0")
	AddAddr(t, ns, "nb-eth0", ip+"/32")
	Run(t, ns, "ip", "route", "add", podGW, "dev", "nb-eth0", "scope", "link")
	Run(t, ns, "ip", "route", "add", "default", "via", podGW, "dev", "nb-eth0")
	Neigh(t, ns, "nb-eth0", podGW, n.Attrs().HardwareAddr)
	Run(t, node, "ip", "route", "add", ip+"/32", "dev", nodeIf, "scope", "link")
	Neigh(t, node, nodeIf, ip, p.Attrs().HardwareAddr)
}

// vxlan creates nb-vx (VNI 42, UDP 4789) from local to remote over nb-up,
// with address addr/30, and returns its MAC.
func vxlan(t T, ns *Netns, local, remote, addr string) net.HardwareAddr {
	t.Helper()
	Run(t, ns, "ip", "link", "add", "nb-vx", "type", "vxlan", "id", "42", "local", local, "remote", remote,
		"dstport", "4789", "dev", "nb-up", "nolearning")
	t.Cleanup(func() { delLink(t, ns, "nb-vx") })
	h := mustHandle(t, ns)
	defer h.Close()
	l := mustUp(t, h, ns, "nb-vx")
	AddAddr(t, ns, "nb-vx", addr+"/30")
	return l.Attrs().HardwareAddr
}

func mustSysctl(t T, ns *Netns, key, value string) {
	t.Helper()
	if err := Sysctl(ns, key, value); err != nil {
		t.Fatalf("netlab: sysctl %s=%s in %s: %v", key, value, ns, err)
	}
}

// Watched are the interfaces of node A and its pods: what the agent
// watches, in the order the test reports them.
func (l *NodeLab) Watched() []NodeIface {
	var out []NodeIface
	for _, p := range []struct {
		ns *Netns
		nb string
	}{{l.A1, "nb-a1"}, {l.A2, "nb-a2"}, {l.B1, "nb-b1"}, {l.B2, "nb-b2"}} {
		out = append(out, NodeIface{p.ns, "nb-eth0", FramingEth}, NodeIface{l.NodeA, p.nb, FramingEth})
	}
	return append(out, NodeIface{l.NodeA, "nb-vx", FramingVXLAN}, NodeIface{l.NodeA, "nb-up", FramingOuter},
		NodeIface{l.NodeA, "nb-tun", FramingIP})
}

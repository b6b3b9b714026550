package datapath_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// Four namespaces, two veth pairs (a-b, c-d), every end named e0 with
// ifindex 77 and the pairs addressed alike: four interfaces that differ
// only by namespace. Each flow lists exactly its own two observations,
// under each namespace's SO_NETNS_COOKIE, with exactly its packets, and the
// interfaces' own counters agree. Both ways the programs get the namespace
// are run: one set shared by every namespace, which reads the device's
// (where the kernel allows it), and the fallback, one set per namespace
// with its cookie as a constant. Programs() reports one set or one per
// namespace, and the fallback releases a namespace's set with its last
// interface.
func TestSameIfindexFourNamespaces(t *testing.T) {
	netlab.Require(t)
	for _, mode := range []struct {
		name  string
		force bool
	}{{"shared", false}, {"per-namespace", true}} {
		t.Run(mode.name, func(t *testing.T) {
			dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1, ForcePerNamespacePrograms: mode.force})
			if err != nil {
				t.Fatal(err)
			}
			defer dp.Close()
			if dp.SharedPrograms() == mode.force {
				if mode.force {
					t.Fatal("ForcePerNamespacePrograms, yet SharedPrograms")
				}
				testkit.Need(t, "TC programs that read the device's namespace (bpf_cast_to_kern_ctx, BTF)",
					errors.New("this kernel refused them: Load fell back to one set per namespace"))
			}
			testSameIfindex(t, dp)
		})
	}
}

func testSameIfindex(t *testing.T, dp *datapath.Datapath) {
	type end struct {
		ns     *netlab.Netns
		ip     string
		cookie uint64
	}
	var ends [4]end
	for i, name := range []string{"a", "b", "c", "d"} {
		ns := netlab.NewNetns(t, "77"+name)
		netlab.Quiet(t, ns)
		c, err := ifaces.NetnsCookie(ns.Path)
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = end{ns, fmt.Sprintf("10.95.0.%d", i%2+1), c}
	}
	for i := 0; i < 4; i += 2 {
		x, y := ends[i], ends[i+1]
		if out, err := netlab.RunIn(x.ns, "ip", "link", "add", "e0", "index", "77", "type", "veth",
			"peer", "name", "e0", "index", "77", "netns", y.ns.Path); err != nil {
			t.Fatalf("veth with equal ifindexes: %v: %s", err, out)
		}
		for _, e := range []end{x, y} {
			if out, err := netlab.RunIn(e.ns, "ip", "link", "set", "e0", "up"); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			netlab.AddAddr(t, e.ns, "e0", e.ip+"/24")
		}
		netlab.Neigh(t, x.ns, "e0", y.ip, link(t, y.ns, "e0").Attrs().HardwareAddr)
		netlab.Neigh(t, y.ns, "e0", x.ip, link(t, x.ns, "e0").Attrs().HardwareAddr)
	}
	iface := func(e end) ifaces.Interface {
		return ifaces.Interface{Name: "e0", Index: 77, Netns: e.ns.Name, NetnsPath: e.ns.Path, NetnsCookie: e.cookie}
	}
	for _, e := range ends {
		if err := dp.Attach(iface(e)); err != nil {
			t.Fatal(err)
		}
	}
	perNs := 1 // sets: the shared one, or cookie 0's and one per namespace
	if !dp.SharedPrograms() {
		perNs = 1 + len(ends)
	}
	if got := tcPrograms(dp); got != 2*perNs { // Ethernet devices: no L3 pair loaded
		t.Errorf("Programs() lists %d TC programs with 4 namespaces attached, want %d", got, 2*perNs)
	}
	for _, e := range ends {
		l, err := netlab.UDPListen(e.ns, e.ip+":9000")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}

	// sport identifies the flow: a->b, b->a, c->d.
	sends := []struct {
		from, to int
		sport    int
		n        int
	}{{0, 1, 4001, 5}, {1, 0, 4002, 3}, {2, 3, 4003, 7}}
	var before [4]netlab.Stats
	for i, e := range ends {
		var err error
		if before[i], err = netlab.ReadLinkStats(e.ns, "e0"); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range sends {
		from, to := ends[s.from], ends[s.to]
		if err := netlab.UDPSend(from.ns, fmt.Sprintf("%s:%d", from.ip, s.sport), to.ip+":9000", []byte("x"), s.n); err != nil {
			t.Fatal(err)
		}
	}

	got := flows(t, dp)
	if len(got) != len(sends) {
		t.Errorf("%d flows, want %d: %+v", len(got), len(sends), got)
	}
	for _, s := range sends {
		i := slices.IndexFunc(got, func(e entry) bool { return int(e.k.SrcPort) == s.sport })
		if i < 0 {
			t.Errorf("no flow from port %d", s.sport)
			continue
		}
		v := got[i].v
		want := []datapath.IfaceObs{
			{Netns: ends[s.from].cookie, Ifindex: 77, Dir: datapath.DirEgress},
			{Netns: ends[s.to].cookie, Ifindex: 77, Dir: datapath.DirIngress},
		}
		have := v.Ifaces[:min(int(v.N_ifaces), len(v.Ifaces))]
		if v.Packets != uint64(s.n) || !slices.Equal(have, want) {
			t.Errorf("flow from port %d: %d packets on %+v, want %d on %+v", s.sport, v.Packets, have, s.n, want)
		}
	}
	// Each interface's packets out and in, by the observations the flows
	// recorded (a flow's packets crossed every interface it lists).
	var sent, rcvd [4]uint64
	for _, e := range got {
		for _, o := range e.v.Ifaces[:min(int(e.v.N_ifaces), len(e.v.Ifaces))] {
			i := slices.IndexFunc(ends[:], func(x end) bool { return x.cookie == o.Netns && o.Ifindex == 77 })
			switch {
			case i < 0:
				t.Errorf("flow from port %d lists an unknown interface %+v", e.k.SrcPort, o)
			case o.Dir == datapath.DirEgress:
				sent[i] += e.v.Packets
			default:
				rcvd[i] += e.v.Packets
			}
		}
	}
	for i, e := range ends {
		after, err := netlab.ReadLinkStats(e.ns, "e0")
		if err != nil {
			t.Fatal(err)
		}
		tx, rx := after.TxPackets-before[i].TxPackets, after.RxPackets-before[i].RxPackets
		if tx != sent[i] || rx != rcvd[i] {
			t.Errorf("%s/e0: the flows count %d out and %d in, its counters %d and %d", e.ns, sent[i], rcvd[i], tx, rx)
		}
	}

	// c and d go: the fallback releases their sets, the shared set stays.
	for _, e := range ends[2:] {
		if err := dp.Detach(iface(e)); err != nil {
			t.Fatal(err)
		}
	}
	if !dp.SharedPrograms() {
		perNs = 1 + 2
	}
	if got := tcPrograms(dp); got != 2*perNs { // Ethernet devices: no L3 pair loaded
		t.Errorf("Programs() lists %d TC programs with 2 namespaces attached, want %d", got, 2*perNs)
	}
}

// link is the interface named name in ns.
func link(t testing.TB, ns *netlab.Netns, name string) netlink.Link {
	t.Helper()
	h, err := netlab.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tcPrograms counts the TC program instances Programs() lists.
func tcPrograms(dp *datapath.Datapath) int {
	n := 0
	for _, p := range dp.Programs() {
		if p.Attach == "tc_ingress" || p.Attach == "tc_egress" {
			n++
		}
	}
	return n
}

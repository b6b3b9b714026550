package ifaces_test

import (
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// NetnsPeers names the namespaces a namespace's devices link into: a veth's
// peer (from either end), a macvlan's lower device's namespace (the
// macvlan moved away from it), each by cookie when known, by 0 when not;
// a namespace with no such link has none.
func TestNetnsPeers(t *testing.T) {
	netlab.Require(t)
	a, b, c, d := netlab.NewNetns(t, "pa"), netlab.NewNetns(t, "pb"), netlab.NewNetns(t, "pc"), netlab.NewNetns(t, "pd")
	netlab.Veth(t, a, "pv-a", b, "pv-b")
	netlab.Veth(t, c, "pv-c", d, "pv-d")
	// A macvlan on b's veth end, moved into c: c's device links into b.
	h, err := netlab.Handle(b)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lower, err := h.LinkByName("pv-b")
	if err != nil {
		t.Fatal(err)
	}
	mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "pm-c", ParentIndex: lower.Attrs().Index,
		Namespace: netlink.NsFd(int(c.Handle))}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := h.LinkAdd(mv); err != nil {
		t.Fatal(err)
	}
	cookie := map[*netlab.Netns]uint64{}
	for _, ns := range []*netlab.Netns{a, b, c, d} {
		if cookie[ns], err = ifaces.NetnsCookie(ns.Path); err != nil {
			t.Fatal(err)
		}
	}
	// d is not known: c's veth leads "outside".
	known := map[uint64]string{cookie[a]: a.Path, cookie[b]: b.Path, cookie[c]: c.Path}
	for _, tc := range []struct {
		ns   *netlab.Netns
		want []uint64
	}{
		{a, []uint64{cookie[b]}},
		{b, []uint64{cookie[a]}},
		{c, []uint64{0, cookie[b]}},
		{d, []uint64{cookie[c]}},
	} {
		got, err := ifaces.NetnsPeers(tc.ns.Path, known)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		slices.Sort(tc.want)
		t.Logf("%s: peers %v", tc.ns.Name, got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: peers %v, want %v", tc.ns.Name, got, tc.want)
		}
	}
	if got, err := ifaces.NetnsPeers("", known); err != nil || slices.Contains(got, cookie[a]) {
		t.Errorf("the agent's namespace: peers %v (%v), want none of the test's", got, err)
	}
}

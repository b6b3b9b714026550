package ifaces_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/vishvananda/netlink"
)

// TestWatchNamedNamespaces selects two namespaces by name (not "all", so the
// namespaces of tests running in parallel elsewhere stay out of the way).
func TestWatchNamedNamespaces(t *testing.T) {
	netlab.Require(t)
	a, b := netlab.NewNetns(t, "wa"), netlab.NewNetns(t, "wb")
	netlab.Quiet(t, a)
	netlab.Quiet(t, b)
	a0, b0 := netlab.Veth(t, a, "a0", b, "b0")
	ha, hb := handle(t, a), handle(t, b)

	ev := watch(t, ifaces.Options{
		Netns: []string{a.Name, b.Name},
		Allowed: func(name string) bool {
			return name != "lo" && !strings.HasPrefix(name, "skip")
		},
	})
	expect(t, ev, added(iface(t, a, a0)), added(iface(t, b, b0)))

	// A new veth pair: one Added per end.
	a1, b1 := netlab.Veth(t, a, "a1", b, "b1")
	expect(t, ev, added(iface(t, a, a1)), added(iface(t, b, b1)))

	// Filtered names are never reported; the next allowed link proves that
	// nothing was queued before it.
	netlab.Bridge(t, a, "skip0")
	down := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "down0"}}
	if err := ha.LinkAdd(down); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ha.LinkDel(down) })
	// down0 is left down: it is still reported (tc attaches to down links).
	expect(t, ev, added(iface(t, a, link(t, ha, "down0"))))

	// Up/down, enslaving to a bridge and releasing are not add/remove, even
	// though releasing sends an RTM_DELLINK for the bridge port.
	br := netlab.Bridge(t, a, "br0")
	expect(t, ev, added(iface(t, a, br)))
	if err := ha.LinkSetDown(a1); err != nil {
		t.Fatal(err)
	}
	netlab.SetMaster(t, a, "a0", "br0")
	if err := ha.LinkSetNoMaster(a0); err != nil {
		t.Fatal(err)
	}
	expectNone(t, ev, 300*time.Millisecond)

	// Rename: Removed old, Added new, same index; to a filtered name: only
	// Removed.
	if err := ha.LinkSetName(a1, "a1new"); err != nil {
		t.Fatal(err)
	}
	expect(t, ev, removed(iface(t, a, a1)), added(ifaceAt(t, a, "a1new", a1.Attrs().Index)))
	if err := ha.LinkSetName(link(t, ha, "a1new"), "skip1"); err != nil {
		t.Fatal(err)
	}
	expect(t, ev, removed(ifaceAt(t, a, "a1new", a1.Attrs().Index)))

	// Deleting one end removes both.
	if err := hb.LinkDel(b1); err != nil {
		t.Fatal(err)
	}
	expect(t, ev, removed(iface(t, b, b1)))

	// Cookies identify the namespaces: different, and stable.
	ca, cb := iface(t, a, a0).NetnsCookie, iface(t, b, b0).NetnsCookie
	if ca == 0 || cb == 0 || ca == cb {
		t.Fatalf("cookies a=%d b=%d", ca, cb)
	}

	// Deleting namespace b: its interfaces are Removed by the watcher (which
	// then lets go of the namespace), and the kernel destroying b takes the
	// a0 end of the veth with it.
	wantB := removed(iface(t, b, b0))
	hb.Close() // its sockets would keep b alive
	if err := b.Delete(); err != nil {
		t.Fatal(err)
	}
	expect(t, ev, wantB, removed(iface(t, a, a0)))
	expectNone(t, ev, 300*time.Millisecond)
}

// TestWatchAll uses "all" on a netns directory of its own.
func TestWatchAll(t *testing.T) {
	netlab.Require(t)
	dir := t.TempDir()
	n1 := netlab.NewNetnsIn(t, dir, "n1")
	netlab.Quiet(t, n1)

	ev := watch(t, ifaces.Options{Netns: []string{ifaces.All}, NetnsDir: dir})
	expect(t, ev, added(ifaceAt(t, n1, "lo", 1))) // nil Allowed: lo too

	n2 := netlab.NewNetnsIn(t, dir, "n2")
	netlab.Quiet(t, n2)
	expect(t, ev, added(ifaceAt(t, n2, "lo", 1)))

	x1, x2 := netlab.Veth(t, n1, "x1", n2, "x2")
	expect(t, ev, added(iface(t, n1, x1)), added(iface(t, n2, x2)))

	want := []ifaces.Event{
		removed(ifaceAt(t, n2, "lo", 1)), removed(iface(t, n2, x2)), // index order
		removed(iface(t, n1, x1)), // gone with n2
	}
	if err := n2.Delete(); err != nil {
		t.Fatal(err)
	}
	expect(t, ev, want...)
	expectNone(t, ev, 300*time.Millisecond)
}

// TestWatchAllLateMount mimics `ip netns add`, which creates the file first
// and bind-mounts the namespace on it afterwards (no inotify event).
func TestWatchAllLateMount(t *testing.T) {
	netlab.Require(t)
	dir := t.TempDir()
	ev := watch(t, ifaces.Options{Netns: []string{ifaces.All}, NetnsDir: dir})
	expectNone(t, ev, 100*time.Millisecond)

	src := netlab.NewNetnsIn(t, t.TempDir(), "src")
	late := lateMount(t, dir+"/late", src.Path, 300*time.Millisecond)
	i := ifaceAt(t, src, "lo", 1)
	i.Netns, i.NetnsPath = "late", late
	expect(t, ev, added(i))
}

// TestWatchMissingDir starts on a NetnsDir that does not exist yet.
func TestWatchMissingDir(t *testing.T) {
	netlab.Require(t)
	dir := t.TempDir() + "/later"
	ev := watch(t, ifaces.Options{Netns: []string{ifaces.All}, NetnsDir: dir})
	expectNone(t, ev, 100*time.Millisecond)
	n := netlab.NewNetnsIn(t, dir, "z") // creates dir
	expect(t, ev, added(ifaceAt(t, n, "lo", 1)))
}

// TestWatchNameBeforeItExists selects a name that appears only later, and
// sees it come, go, and come back.
func TestWatchNameBeforeItExists(t *testing.T) {
	netlab.Require(t)
	dir := t.TempDir()
	other := netlab.NewNetnsIn(t, dir, "other") // not selected
	_ = other
	src := netlab.NewNetnsIn(t, t.TempDir(), "src")
	ev := watch(t, ifaces.Options{Netns: []string{"wanted"}, NetnsDir: dir})
	expectNone(t, ev, 100*time.Millisecond)

	p := lateMount(t, dir+"/wanted", src.Path, 0)
	i := ifaceAt(t, src, "lo", 1)
	i.Netns, i.NetnsPath = "wanted", p
	expect(t, ev, added(i))
	unmountRemove(t, p)
	expect(t, ev, removed(i))
	lateMount(t, p, src.Path, 0)
	expect(t, ev, added(i))
}

// TestWatchHost follows only a uniquely named veth end in the host, so links
// of other tests running on the host do not matter.
func TestWatchHost(t *testing.T) {
	netlab.Require(t)
	peer := netlab.NewNetns(t, "hostpeer")
	name := netlab.IfName("flh")
	ev := watch(t, ifaces.Options{Allowed: func(n string) bool { return n == name }})
	expectNone(t, ev, 100*time.Millisecond)

	h, _ := netlab.Veth(t, nil, name, peer, "p0")
	want := iface(t, nil, h)
	if want.NetnsPath != "" || want.Netns != ifaces.Host {
		t.Fatalf("host interface %+v", want)
	}
	expect(t, ev, added(want))
	if err := netlink.LinkDel(h); err != nil {
		t.Fatal(err)
	}
	expect(t, ev, removed(want))
}

func TestInvalidOptions(t *testing.T) {
	for _, n := range []string{"", "a/b", ".."} {
		err := ifaces.New(ifaces.Options{Netns: []string{n}}).Run(t.Context(), nil)
		if err == nil {
			t.Errorf("netns %q accepted", n)
		}
	}
}

// TestWatchAliases: a namespace mounted under two names, or the host's
// mounted in NetnsDir, is watched once, so its interfaces are not reported
// (and attached to) twice.
func TestWatchAliases(t *testing.T) {
	netlab.Require(t)
	dir := t.TempDir()
	n := netlab.NewNetnsIn(t, dir, "n")
	lateMount(t, dir+"/zz-alias", n.Path, 0) // sorts after n's name
	lateMount(t, dir+"/host-alias", "/proc/thread-self/ns/net", 0)
	ev := watch(t, ifaces.Options{
		Netns: []string{ifaces.Host, ifaces.All}, NetnsDir: dir,
		Allowed: func(n string) bool { return n == "lo" }, // the host has others
	})
	expect(t, ev, added(ifaceAt(t, nil, "lo", 1)), added(ifaceAt(t, n, "lo", 1)))
	expectNone(t, ev, 300*time.Millisecond)
}

// ReportExcluded: an interface with a refused name is reported once as
// Excluded when it appears (at start or later, or renamed to a refused
// name), never as Added, and its removal is not reported.
func TestReportExcluded(t *testing.T) {
	netlab.Require(t)
	a, b := netlab.NewNetns(t, "xa"), netlab.NewNetns(t, "xb")
	netlab.Quiet(t, a)
	netlab.Quiet(t, b)
	a0, _ := netlab.Veth(t, a, "a0", b, "b0")
	ev := watch(t, ifaces.Options{
		Netns:          []string{a.Name},
		Allowed:        func(name string) bool { return strings.HasPrefix(name, "a") },
		ReportExcluded: true,
	})
	ha := handle(t, a)
	lo := link(t, ha, "lo")
	excluded := func(i ifaces.Interface) ifaces.Event { return ifaces.Event{Type: ifaces.Excluded, Iface: i} }
	expect(t, ev, excluded(iface(t, a, lo)), added(iface(t, a, a0)))

	sk, _ := netlab.Veth(t, a, "skip1", b, "b1")
	expect(t, ev, excluded(iface(t, a, sk)))
	if err := ha.LinkDel(sk); err != nil {
		t.Fatal(err)
	}
	// Renamed to a refused name: Removed, then Excluded.
	if err := ha.LinkSetDown(a0); err != nil {
		t.Fatal(err)
	}
	if err := ha.LinkSetName(a0, "zz0"); err != nil {
		t.Fatal(err)
	}
	expect(t, ev, removed(iface(t, a, a0)), excluded(ifaceAt(t, a, "zz0", a0.Attrs().Index)))
	expectNone(t, ev, 200*time.Millisecond)
}

// ReportSynced: one Synced event follows the interfaces present at start
// (here in three namespaces and the host), and later ones come after it.
func TestReportSynced(t *testing.T) {
	netlab.Require(t)
	dir := t.TempDir()
	var ns []*netlab.Netns
	for _, name := range []string{"s1", "s2", "s3"} {
		n := netlab.NewNetnsIn(t, dir, name)
		netlab.Quiet(t, n)
		ns = append(ns, n)
	}
	ev := watch(t, ifaces.Options{
		Netns: []string{ifaces.Host, ifaces.All}, NetnsDir: dir,
		Allowed:      func(n string) bool { return n == "lo" },
		ReportSynced: true,
	})
	want := []ifaces.Event{added(ifaceAt(t, nil, "lo", 1))}
	for _, n := range ns {
		want = append(want, added(ifaceAt(t, n, "lo", 1)))
	}
	if g, w := byNetns(untilSynced(t, ev)), byNetns(want); !slices.Equal(g, w) {
		t.Fatalf("before Synced\n got: %s\nwant: %s", show(g), show(w))
	}
	late := netlab.NewNetnsIn(t, dir, "s4")
	netlab.Quiet(t, late)
	expect(t, ev, added(ifaceAt(t, late, "lo", 1))) // after Synced; no second Synced
	expectNone(t, ev, 200*time.Millisecond)
}

// ReportSynced with only the host watched.
func TestReportSyncedHostOnly(t *testing.T) {
	netlab.Require(t)
	ev := watch(t, ifaces.Options{Allowed: func(n string) bool { return n == "lo" }, ReportSynced: true})
	if got, want := untilSynced(t, ev), []ifaces.Event{added(ifaceAt(t, nil, "lo", 1))}; !slices.Equal(got, want) {
		t.Fatalf("before Synced: got %v, want %v", got, want)
	}
	expectNone(t, ev, 200*time.Millisecond)
}

// untilSynced returns the events before Synced, which must come within 5s
// and carry no interface.
func untilSynced(t *testing.T, ev <-chan ifaces.Event) []ifaces.Event {
	t.Helper()
	var got []ifaces.Event
	timeout := time.After(5 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.Type != ifaces.Synced {
				got = append(got, e)
				continue
			}
			if e.Iface != (ifaces.Interface{}) {
				t.Errorf("Synced carries an interface: %v", e.Iface)
			}
			return got
		case <-timeout:
			t.Fatalf("no Synced in 5s; got %v", got)
		}
	}
}

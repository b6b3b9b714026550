package ifaces_test

import (
	"context"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/vishvananda/netlink"
)

func TestNetnsCookie(t *testing.T) {
	netlab.Require(t)
	a, b := netlab.NewNetns(t, "ca"), netlab.NewNetns(t, "cb")
	cookie := func(p string) uint64 {
		t.Helper()
		c, err := ifaces.NetnsCookie(p)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, cb, ch := cookie(a.Path), cookie(b.Path), cookie("")
	if ca == cb || ca == ch || cb == ch || ca == 0 {
		t.Fatalf("cookies not distinct: a=%d b=%d host=%d", ca, cb, ch)
	}
	if cookie(a.Path) != ca || cookie(b.Path) != cb || cookie("") != ch {
		t.Fatal("cookies not stable")
	}
	// The same namespace reached by another path has the same cookie.
	alias := lateMount(t, t.TempDir()+"/alias", a.Path, 0)
	if cookie(alias) != ca {
		t.Fatal("alias of a has another cookie")
	}
	if _, err := ifaces.NetnsCookie(a.Dir + "/does-not-exist"); err == nil {
		t.Fatal("missing path accepted")
	}
	plain := t.TempDir() + "/plain"
	os.WriteFile(plain, nil, 0o644)
	if _, err := ifaces.NetnsCookie(plain); err == nil {
		t.Fatal("plain file accepted as a namespace")
	}
}

func TestInNetns(t *testing.T) {
	netlab.Require(t)
	a, b := netlab.NewNetnsIn(t, t.TempDir(), "ia"), netlab.NewNetnsIn(t, t.TempDir(), "ib")
	netlab.Veth(t, a, "in0", b, "in1")

	var names []string
	err := ifaces.InNetns(a.Path, func() error {
		links, err := netlink.LinkList()
		for _, l := range links {
			names = append(names, l.Attrs().Name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(names); !slices.Equal(names, []string{"in0", "lo"}) {
		t.Fatalf("links inside a: %v", names)
	}

	// "" runs fn directly, in the caller's namespace.
	host := threadNetns(t)
	if err := ifaces.InNetns("", func() error {
		if got := threadNetns(t); got != host {
			t.Errorf("ran in %s, not the caller's %s", got, host)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// A panic comes back to the caller, after the thread was switched back.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic not propagated")
			}
		}()
		ifaces.InNetns(a.Path, func() error { panic("boom") })
	}()

	if err := ifaces.InNetns(t.TempDir(), func() error { return nil }); err == nil {
		t.Fatal("a directory accepted as a namespace")
	}

	// Whatever thread the scheduler hands out must be in the host netns.
	for i := 0; i < 200; i++ {
		got := make(chan string)
		go func() { got <- threadNetns(t) }()
		if ns := <-got; ns != host {
			t.Fatalf("a thread was left in %s", ns)
		}
	}
}

func threadNetns(t *testing.T) string {
	l, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Error(err)
	}
	return l
}

// TestRunReleasesEverything checks that once Run returns, its goroutines,
// fds (netlink sockets, namespace fds, inotify) are all gone.
func TestRunReleasesEverything(t *testing.T) {
	netlab.Require(t)
	dir := t.TempDir()
	a := netlab.NewNetnsIn(t, dir, "la")
	b := netlab.NewNetnsIn(t, dir, "lb")
	netlab.Veth(t, a, "l0", b, "l1")

	want := []ifaces.Event{
		added(ifaceAt(t, a, "l0", linkIndex(t, a, "l0"))),
		added(ifaceAt(t, b, "l1", linkIndex(t, b, "l1"))),
	}
	g0, fd0 := runtime.NumGoroutine(), openFds(t)
	for round := 0; round < 3; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		events := make(chan ifaces.Event, 64)
		ret := make(chan error, 1)
		go func() {
			ret <- ifaces.New(ifaces.Options{
				Netns: []string{ifaces.Host, ifaces.All}, NetnsDir: dir,
				Allowed: func(n string) bool { return n == "l0" || n == "l1" },
			}).Run(ctx, events)
		}()
		expect(t, events, want...)
		c := netlab.NewNetnsIn(t, dir, "lc") // one namespace more to follow
		_ = c
		time.Sleep(100 * time.Millisecond)
		cancel()
		if err := <-ret; err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(); err != nil {
			t.Fatal(err)
		}
	}
	// Goroutines exit asynchronously after their last send; give them a moment.
	deadline := time.Now().Add(3 * time.Second)
	for {
		g, fd := runtime.NumGoroutine(), openFds(t)
		if g <= g0 && fd <= fd0 {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("leak: goroutines %d -> %d, fds %d -> %d\n%s", g0, g, fd0, fd, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func openFds(t *testing.T) int {
	e, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(e)
}

func linkIndex(t *testing.T, ns *netlab.Netns, name string) int {
	h := handle(t, ns)
	defer h.Close()
	return link(t, h, name).Attrs().Index
}

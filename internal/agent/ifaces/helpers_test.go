package ifaces_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// watch runs a Watcher until the test ends and checks that Run then returns
// nil promptly.
func watch(t *testing.T, opts ifaces.Options) <-chan ifaces.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan ifaces.Event, 256)
	ret := make(chan error, 1)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	go func() { ret <- ifaces.New(opts).Run(ctx, events) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-ret:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	return events
}

// iface is the Interface a watcher must report for link l in ns.
func iface(t *testing.T, ns *netlab.Netns, l netlink.Link) ifaces.Interface {
	t.Helper()
	return ifaceAt(t, ns, l.Attrs().Name, l.Attrs().Index)
}

func ifaceAt(t *testing.T, ns *netlab.Netns, name string, index int) ifaces.Interface {
	t.Helper()
	i := ifaces.Interface{Name: name, Index: index, Netns: ifaces.Host}
	if ns != nil {
		i.Netns, i.NetnsPath = ns.Name, ns.Path
	}
	c, err := ifaces.NetnsCookie(i.NetnsPath)
	if err != nil {
		t.Fatal(err)
	}
	i.NetnsCookie = c
	return i
}

func added(i ifaces.Interface) ifaces.Event   { return ifaces.Event{Type: ifaces.Added, Iface: i} }
func removed(i ifaces.Interface) ifaces.Event { return ifaces.Event{Type: ifaces.Removed, Iface: i} }

// expect reads len(want) events and compares them with want. Events of one
// namespace must come in the order given; namespaces interleave freely, as
// each is watched by its own goroutine.
func expect(t *testing.T, ch <-chan ifaces.Event, want ...ifaces.Event) {
	t.Helper()
	var got []ifaces.Event
	timeout := time.After(5 * time.Second)
	for len(got) < len(want) {
		select {
		case ev := <-ch:
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("timed out after %d of %d events\n got: %v\nwant: %v", len(got), len(want), got, want)
		}
	}
	if g, w := byNetns(got), byNetns(want); !slices.Equal(g, w) {
		t.Fatalf("events differ\n got: %s\nwant: %s", show(g), show(w))
	}
}

// expectNone checks that no event arrives for d.
func expectNone(t *testing.T, ch <-chan ifaces.Event, d time.Duration) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("unexpected event %v", ev)
	case <-time.After(d):
	}
}

// byNetns renders events grouped by namespace, keeping the order within each.
func byNetns(evs []ifaces.Event) []string {
	var out []string
	for _, ev := range evs {
		i := ev.Iface
		out = append(out, fmt.Sprintf("%s\x00%v %s idx=%d path=%q cookie=%d",
			i.Netns, ev.Type, i.Name, i.Index, i.NetnsPath, i.NetnsCookie))
	}
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Compare(a[:strings.IndexByte(a, 0)], b[:strings.IndexByte(b, 0)])
	})
	return out
}

func show(lines []string) string {
	return strings.ReplaceAll(strings.Join(lines, "\n      "), "\x00", " | ")
}

func handle(t *testing.T, ns *netlab.Netns) *netlink.Handle {
	t.Helper()
	h, err := netlab.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func link(t *testing.T, h *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tlog sends the watcher's log to the test log; Run has returned before the
// test completes, so nothing logs after.
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// lateMount creates an empty file at path, waits delay, then bind-mounts the
// namespace at src onto it: the two steps of `ip netns add`.
func lateMount(t *testing.T, path, src string, delay time.Duration) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { unmountRemove(t, path) })
	time.Sleep(delay)
	if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	return path
}

func unmountRemove(t *testing.T, path string) {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		t.Errorf("unmount %s: %v", path, err)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		t.Errorf("remove %s: %v", path, err)
	}
}

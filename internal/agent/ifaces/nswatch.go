package ifaces

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// errNetnsGone is the cancel cause telling a nsWatcher that its namespace
// was deleted, so it must report its interfaces as Removed before exiting.
var errNetnsGone = errors.New("network namespace deleted")

// nsWatcher follows the links of one namespace. It owns the namespace fd and
// its netlink sockets, which keep the namespace alive: they are closed as
// soon as it stops, so a deleted namespace is really freed.
type nsWatcher struct {
	tmpl   Interface // Netns, NetnsPath and NetnsCookie of every event
	fd     int       // namespace fd; -1 for Host (no thread switching)
	ino    uint64    // nsfs inode: the namespace's identity while it lives
	filter filter
	emit   func(Event) bool
	log    *slog.Logger
	links  map[int]string // every link, allowed or not: ifindex -> name
}

// newNsWatcher opens the namespace at path ("" for Host) and emits Added for
// its current links. The caller then runs it, or closes it on error.
func newNsWatcher(name, path string, f filter, emit func(Event) bool, log *slog.Logger) (*nsWatcher, *subscription, error) {
	fdPath := path
	if path == "" {
		fdPath = "/proc/thread-self/ns/net"
	}
	fd, err := unix.Open(fdPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	n := &nsWatcher{
		tmpl: Interface{Netns: name, NetnsPath: path}, fd: fd,
		filter: f, emit: emit, log: log.With("netns", name),
		links: map[int]string{},
	}
	if n.ino, err = nsfsInode(fd); err != nil {
		n.closeFd()
		return nil, nil, err
	}
	if path == "" {
		n.closeFd() // the host needs no setns; only its identity was wanted
	}
	if n.tmpl.NetnsCookie, err = netnsCookieFd(n.fd); err != nil {
		n.log.Warn("no netns cookie; reporting 0", "err", err)
	}
	sub, err := n.sync()
	if err != nil {
		n.closeFd()
		return nil, nil, err
	}
	return n, sub, nil
}

// run follows link changes until ctx ends. If it ended with errNetnsGone,
// every known allowed link is reported Removed.
func (n *nsWatcher) run(ctx context.Context, sub *subscription) {
	defer n.closeFd()
	for sub != nil {
		n.consume(ctx, sub)
		sub.close()
		sub = nil
		// Unless ctx ended, the kernel closed the subscription (typically
		// ENOBUFS after a burst of changes): subscribe again and diff
		// against a fresh listing.
		for backoff := 100 * time.Millisecond; ctx.Err() == nil; backoff = min(2*backoff, 5*time.Second) {
			s, err := n.sync()
			if err == nil {
				sub = s
				break
			}
			n.log.Warn("resubscribing to link changes", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
		}
	}
	if errors.Is(context.Cause(ctx), errNetnsGone) {
		for _, i := range sortedKeys(n.links) {
			n.remove(i)
		}
	}
}

// consume applies updates until ctx ends or the subscription breaks.
func (n *nsWatcher) consume(ctx context.Context, sub *subscription) {
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-sub.ch:
			if !ok {
				return
			}
			// AF_BRIDGE messages on the same group announce bridge port
			// changes (an RTM_DELLINK when a port leaves its bridge): the
			// link itself is untouched.
			if u.IfInfomsg.Family != unix.AF_UNSPEC || u.Link == nil {
				continue
			}
			switch u.Header.Type {
			case unix.RTM_NEWLINK:
				n.upsert(int(u.IfInfomsg.Index), u.Link.Attrs().Name)
			case unix.RTM_DELLINK:
				n.remove(int(u.IfInfomsg.Index))
			}
		}
	}
}

// sync subscribes first and lists second, so no change falls between the
// two. Updates queued before the listing are applied after it: mostly no-ops,
// at worst a short replay of older states that always ends on the current
// one (every Added still gets its Removed).
func (n *nsWatcher) sync() (*subscription, error) {
	sub, err := n.subscribe()
	if err != nil {
		return nil, err
	}
	links, err := n.list()
	if err != nil {
		sub.close()
		return nil, err
	}
	present := map[int]bool{}
	for _, l := range links {
		present[l.Attrs().Index] = true
		n.upsert(l.Attrs().Index, l.Attrs().Name)
	}
	for _, i := range sortedKeys(n.links) {
		if !present[i] {
			n.remove(i)
		}
	}
	return sub, nil
}

func (n *nsWatcher) upsert(index int, name string) {
	old, known := n.links[index]
	if known && old == name {
		return // flags, MTU, master... changed: not our business
	}
	if known {
		n.report(Removed, index, old)
	}
	n.links[index] = name
	n.report(Added, index, name)
}

func (n *nsWatcher) remove(index int) {
	name, known := n.links[index]
	if !known {
		return
	}
	delete(n.links, index)
	n.report(Removed, index, name)
}

func (n *nsWatcher) report(t EventType, index int, name string) {
	i := n.tmpl
	i.Name, i.Index = name, index
	if n.filter.allowed != nil && !n.filter.allowed(name) {
		if t == Added && n.filter.reportExcluded {
			n.emit(Event{Type: Excluded, Iface: i})
		}
		return
	}
	n.emit(Event{Type: t, Iface: i})
}

func (n *nsWatcher) list() ([]netlink.Link, error) {
	var links []netlink.Link
	err := InNetnsFd(n.fd, func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		for try := 0; ; try++ {
			links, err = h.LinkList()
			if !errors.Is(err, netlink.ErrDumpInterrupted) || try == 4 {
				return err
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	return links, nil
}

func (n *nsWatcher) closeFd() {
	if n.fd >= 0 {
		unix.Close(n.fd)
		n.fd = -1
	}
}

// nsfsInode checks that fd is a namespace (not the plain file `ip netns add`
// creates before bind-mounting onto it) and returns its inode.
func nsfsInode(fd int) (uint64, error) {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return 0, err
	}
	if fs.Type != unix.NSFS_MAGIC {
		return 0, errNotNetns
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

var errNotNetns = errors.New("not a namespace (yet)")

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

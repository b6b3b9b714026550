package netlab

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Handle returns a netlink handle whose sockets live in ns (nil: the current
// namespace), so its calls need no thread switching. Close it when done.
func Handle(ns *Netns) (*netlink.Handle, error) {
	var h *netlink.Handle
	err := ns.Do(func() (err error) {
		h, err = netlink.NewHandle()
		return err
	})
	return h, err
}

// IfName returns a random interface name "<prefix><hex>" of at most 15 bytes,
// for links in a namespace shared with other test processes (the host).
func IfName(prefix string) string {
	if len(prefix) > 7 {
		prefix = prefix[:7]
	}
	return prefix + randHex(4)
}

// Veth creates a veth pair aName (in a) <-> bName (in b), sets both ends up
// and deletes the pair when the test ends. nil means the test process's own
// namespace; there, pick names with IfName so parallel tests do not clash.
func Veth(t T, a *Netns, aName string, b *Netns, bName string) (ifA, ifB netlink.Link) {
	t.Helper()
	Require(t)
	ha := mustHandle(t, a)
	defer ha.Close()
	hb := mustHandle(t, b)
	defer hb.Close()

	peerNs, err := nsFd(b)
	if err != nil {
		t.Fatalf("netlab: veth: %v", err)
	}
	defer peerNs.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: aName},
		PeerName:      bName,
		PeerNamespace: netlink.NsFd(peerNs),
	}
	if err := ha.LinkAdd(veth); err != nil {
		t.Fatalf("netlab: add veth %s/%s <-> %s/%s: %v", a, aName, b, bName, err)
	}
	t.Cleanup(func() { delLink(t, a, aName) })

	ifA = mustUp(t, ha, a, aName)
	ifB = mustUp(t, hb, b, bName)
	return ifA, ifB
}

// Bridge creates a bridge that is up, deleted when the test ends.
func Bridge(t T, ns *Netns, name string) netlink.Link {
	t.Helper()
	return addLink(t, ns, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}})
}

// QuietBridge is a Bridge without multicast snooping, so that the bridge
// itself sends no query: only the traffic under test crosses it.
func QuietBridge(t T, ns *Netns, name string) netlink.Link {
	t.Helper()
	off := false
	return addLink(t, ns, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}, MulticastSnooping: &off})
}

func addLink(t T, ns *Netns, l netlink.Link) netlink.Link {
	t.Helper()
	Require(t)
	h := mustHandle(t, ns)
	defer h.Close()
	name := l.Attrs().Name
	if err := h.LinkAdd(l); err != nil {
		t.Fatalf("netlab: add %s %s/%s: %v", l.Type(), ns, name, err)
	}
	t.Cleanup(func() { delLink(t, ns, name) })
	return mustUp(t, h, ns, name)
}

// SetMaster enslaves ifname to master (e.g. a Bridge) in ns.
func SetMaster(t T, ns *Netns, ifname, master string) {
	t.Helper()
	h := mustHandle(t, ns)
	defer h.Close()
	l, err := h.LinkByName(ifname)
	if err == nil {
		var m netlink.Link
		if m, err = h.LinkByName(master); err == nil {
			err = h.LinkSetMaster(l, m)
		}
	}
	if err != nil {
		t.Fatalf("netlab: set master of %s/%s to %s: %v", ns, ifname, master, err)
	}
}

// AddAddr adds cidr ("10.0.0.1/24", "fd00::1/64") to ifname in ns. IPv6
// addresses are added with nodad, so they are usable at once and send no
// neighbour solicitation.
func AddAddr(t T, ns *Netns, ifname, cidr string) {
	t.Helper()
	addr, err := netlink.ParseAddr(cidr)
	if err != nil {
		t.Fatalf("netlab: parse %q: %v", cidr, err)
	}
	if addr.IP.To4() == nil {
		addr.Flags |= unix.IFA_F_NODAD
	}
	h := mustHandle(t, ns)
	defer h.Close()
	l, err := h.LinkByName(ifname)
	if err == nil {
		err = h.AddrAdd(l, addr)
	}
	if err != nil {
		t.Fatalf("netlab: add %s to %s/%s: %v", cidr, ns, ifname, err)
	}
}

// Neigh adds a permanent neighbour entry (ip -> mac) on ifname in ns. Tests
// that count packets pin both sides so no ARP/NDP exchange adds to the counts.
func Neigh(t T, ns *Netns, ifname, ip string, mac net.HardwareAddr) {
	t.Helper()
	h := mustHandle(t, ns)
	defer h.Close()
	l, err := h.LinkByName(ifname)
	if err == nil {
		fam := netlink.FAMILY_V4
		if net.ParseIP(ip).To4() == nil {
			fam = netlink.FAMILY_V6
		}
		err = h.NeighSet(&netlink.Neigh{
			LinkIndex: l.Attrs().Index, Family: fam, State: netlink.NUD_PERMANENT,
			IP: net.ParseIP(ip), HardwareAddr: mac,
		})
	}
	if err != nil {
		t.Fatalf("netlab: neigh %s lladdr %s on %s/%s: %v", ip, mac, ns, ifname, err)
	}
}

// Stats are an interface's own kernel counters (IFLA_STATS64).
type Stats struct {
	RxPackets, RxBytes, TxPackets, TxBytes uint64
}

// ReadLinkStats reads ifname's counters in ns.
func ReadLinkStats(ns *Netns, ifname string) (Stats, error) {
	h, err := Handle(ns)
	if err != nil {
		return Stats{}, err
	}
	defer h.Close()
	l, err := h.LinkByName(ifname)
	if err != nil {
		return Stats{}, err
	}
	s := l.Attrs().Statistics
	if s == nil {
		return Stats{}, fmt.Errorf("%s/%s: kernel sent no statistics", ns, ifname)
	}
	return Stats{s.RxPackets, s.RxBytes, s.TxPackets, s.TxBytes}, nil
}

// LinkStats is ReadLinkStats for test code that has no error path: it panics
// if the counters cannot be read, which for a link the test created is a bug.
func LinkStats(ns *Netns, ifname string) (rxPackets, rxBytes, txPackets, txBytes uint64) {
	s, err := ReadLinkStats(ns, ifname)
	if err != nil {
		panic(fmt.Sprintf("netlab: LinkStats %s/%s: %v", ns, ifname, err))
	}
	return s.RxPackets, s.RxBytes, s.TxPackets, s.TxBytes
}

func mustHandle(t T, ns *Netns) *netlink.Handle {
	t.Helper()
	h, err := Handle(ns)
	if err != nil {
		t.Fatalf("netlab: netlink handle in %s: %v", ns, err)
	}
	return h
}

func mustUp(t T, h *netlink.Handle, ns *Netns, name string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err == nil {
		err = h.LinkSetUp(l)
	}
	if err == nil {
		l, err = h.LinkByName(name) // again, for the current flags
	}
	if err != nil {
		t.Fatalf("netlab: set %s/%s up: %v", ns, name, err)
	}
	return l
}

// delLink is a cleanup: a link already gone (deleted by the test, or with
// its namespace) is fine.
func delLink(t T, ns *Netns, name string) {
	if ns != nil && !ns.Handle.IsOpen() {
		return // namespace deleted: the link went with it
	}
	h, err := Handle(ns)
	if err != nil {
		t.Errorf("netlab: cleanup %s/%s: %v", ns, name, err)
		return
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err == nil {
		err = h.LinkDel(l)
	}
	var nf netlink.LinkNotFoundError
	if err != nil && !errors.As(err, &nf) {
		t.Errorf("netlab: cleanup %s/%s: %v", ns, name, err)
	}
}

// nsFd opens a new fd for ns; for nil, the test process's namespace. That is
// the calling thread's: every thread running Go code is kept in it, while
// /proc/self names the main thread, which the runtime may have wedged in
// another namespace if a goroutine exited locked to it.
func nsFd(ns *Netns) (netns.NsHandle, error) {
	if ns == nil {
		return netns.GetFromPath("/proc/thread-self/ns/net")
	}
	return netns.GetFromPath(ns.Path)
}

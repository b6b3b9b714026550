package ifaces

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NetnsPeers returns the namespaces a packet can cross into from the
// namespace bound at path ("" for the agent's own): those of the devices
// whose link lives in another namespace, as rtnetlink reports them
// (IFLA_LINK_NETNSID: a veth's peer, a vxlan, geneve or ip tunnel's
// underlay, a macvlan or ipvlan's lower device). Each is named by its
// cookie when it is one of known (cookie -> path, "" for the agent's own),
// else by 0: a namespace the caller does not know.
func NetnsPeers(path string, known map[uint64]string) ([]uint64, error) {
	ns, err := openNetns(path)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", nsName(path), err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links in %s: %w", nsName(path), err)
	}
	want := map[int]uint64{} // the namespace ids (this namespace's) that links point to
	for _, l := range links {
		if id := l.Attrs().NetNsID; id >= 0 {
			want[id] = 0
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	// Which known namespace each id is: ids are this namespace's own
	// names for the others (RTM_GETNSID), stable while both live.
	for cookie, p := range known {
		if p == path {
			continue
		}
		other, err := openNetns(p)
		if err != nil {
			continue // gone: its id, if any, is left unknown
		}
		id, err := h.GetNetNsIdByFd(int(other))
		other.Close()
		if err != nil {
			continue
		}
		if _, ok := want[id]; ok {
			want[id] = cookie
		}
	}
	out := make([]uint64, 0, len(want))
	for _, c := range want {
		out = append(out, c)
	}
	return out, nil
}

func openNetns(path string) (netns.NsHandle, error) {
	if path == "" {
		path = "/proc/self/ns/net"
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return ns, fmt.Errorf("open netns %s: %w", path, err)
	}
	return ns, nil
}

func nsName(path string) string {
	if path == "" {
		return Host
	}
	return path
}

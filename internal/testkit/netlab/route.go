package netlab

import (
	"net"

	"github.com/vishvananda/netlink"
)

// Route adds the route to dst ("10.0.0.0/24", "10.0.0.1/32") via the
// gateway gw on dev in ns, or replaces the route to dst there, like
// `ip route replace dst via gw dev dev`: a route change takes effect for the
// next packet routed.
func Route(t T, ns *Netns, dst, gw, dev string) {
	t.Helper()
	_, ipnet, err := net.ParseCIDR(dst)
	if err != nil {
		t.Fatalf("netlab: route: parse %q: %v", dst, err)
	}
	h := mustHandle(t, ns)
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err == nil {
		err = h.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipnet, Gw: net.ParseIP(gw)})
	}
	if err != nil {
		t.Fatalf("netlab: route replace %s via %s dev %s in %s: %v", dst, gw, dev, ns, err)
	}
}

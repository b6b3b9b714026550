package netlab

import (
	"github.com/vishvananda/netlink"

	"github.com/flowlens/flowlens/internal/agent/ifaces"
)

// Do runs fn inside the namespace and returns its error. On nil it runs fn
// directly. It is ifaces.InNetnsFd (the agent's own way of entering a
// namespace): fn runs on a locked OS thread switched in and back, sockets it
// creates stay in the namespace, and a panic or t.FailNow in fn reaches the
// caller.
func (n *Netns) Do(fn func() error) error {
	if n == nil {
		return fn()
	}
	return ifaces.InNetnsFd(int(n.Handle), fn)
}

func setLoUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}

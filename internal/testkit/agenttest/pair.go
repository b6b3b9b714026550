package agenttest

import (
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// Pair is two namespaces joined by a veth, with static neighbours and IPv6
// off, so the veth counters see only the test's traffic.
type Pair struct {
	A, B     *netlab.Netns
	IfA, IfB string
	IPA, IPB string
}

// NewPair joins two namespaces, a (10.99.0.1) and b (10.99.0.2), quiet.
func NewPair(t *testing.T) *Pair {
	t.Helper()
	return PairOf(t, "a", "b", "10.99.0.1", "10.99.0.2", "/24", netlab.Quiet)
}

// PairOf joins two new namespaces with a veth pair (veth-a, veth-b)
// addressed ipA and ipB (prefix: "/24"), with static neighbours; quiet
// silences each namespace's own traffic.
func PairOf(t *testing.T, nameA, nameB, ipA, ipB, prefix string, quiet func(netlab.T, *netlab.Netns)) *Pair {
	t.Helper()
	p := &Pair{A: netlab.NewNetns(t, nameA), B: netlab.NewNetns(t, nameB), IfA: "veth-a", IfB: "veth-b", IPA: ipA, IPB: ipB}
	quiet(t, p.A)
	quiet(t, p.B)
	la, lb := netlab.Veth(t, p.A, p.IfA, p.B, p.IfB)
	netlab.AddAddr(t, p.A, p.IfA, p.IPA+prefix)
	netlab.AddAddr(t, p.B, p.IfB, p.IPB+prefix)
	netlab.Neigh(t, p.A, p.IfA, p.IPB, lb.Attrs().HardwareAddr)
	netlab.Neigh(t, p.B, p.IfB, p.IPA, la.Attrs().HardwareAddr)
	return p
}

// TCPSend connects from ns to addr, writes size bytes and closes; it
// returns the connection's local port.
func TCPSend(t *testing.T, ns *netlab.Netns, network, addr string, size int) (port int) {
	t.Helper()
	err := ns.Do(func() error {
		c, err := net.Dial(network, addr)
		if err != nil {
			return err
		}
		port = c.LocalAddr().(*net.TCPAddr).Port
		if _, err := c.Write(make([]byte, size)); err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TCPSink listens on addr in ns and reports on the returned channel how
// many bytes its first connection carried (-1 if none came).
func TCPSink(t *testing.T, ns *netlab.Netns, network, addr string) <-chan int64 {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen(network, addr); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	return got
}

// MACA is veth-a's hardware address, read in its namespace: what a raw
// sender on veth-a writes as the source of its frames.
func (p *Pair) MACA(t *testing.T) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	if err := p.A.Do(func() error {
		i, err := net.InterfaceByName(p.IfA)
		if err == nil {
			mac = i.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}

// NetnsArg is the --netns flag that watches both namespaces.
func (p *Pair) NetnsArg() string { return "--netns=" + p.A.Name + "," + p.B.Name }

// MustListen opens a UDP socket on addr in ns, closed with the test.
func MustListen(t *testing.T, ns *netlab.Netns, addr string) *net.UDPConn {
	t.Helper()
	c, err := netlab.UDPListen(ns, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// AwaitReceived waits up to 60s for the byte count a transfer's receiver
// reports on got, and fails unless it is size.
func AwaitReceived(t *testing.T, got <-chan int64, size int) {
	t.Helper()
	select {
	case n := <-got:
		if n != int64(size) {
			t.Fatalf("received %d bytes, want %d", n, size)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("transfer did not finish in 60s")
	}
}

// Transfer sends size bytes from A to B over TCP on port and returns when B
// has read them all.
func (p *Pair) Transfer(t *testing.T, port, size int) {
	t.Helper()
	addr := net.JoinHostPort(p.IPB, strconv.Itoa(port))
	got := TCPSink(t, p.B, "tcp", addr)
	TCPSend(t, p.A, "tcp", addr, size)
	AwaitReceived(t, got, size)
}

package netlab

import (
	"net"
	"os/exec"
)

// UDPListen opens a UDP socket bound to addr ("10.0.0.2:9000") inside ns.
// The socket stays in ns; the caller reads it from any goroutine and closes it.
func UDPListen(ns *Netns, addr string) (*net.UDPConn, error) {
	la, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	var c *net.UDPConn
	err = ns.Do(func() (err error) {
		c, err = net.ListenUDP("udp", la)
		return err
	})
	return c, err
}

// UDPSend sends n datagrams carrying payload from src (ip:port, "" for any)
// to dst, from a socket created inside ns. The socket is left unconnected on
// purpose: a connected one would fail the following sends with ECONNREFUSED
// once an ICMP port-unreachable comes back.
func UDPSend(ns *Netns, src, dst string, payload []byte, n int) error {
	var la *net.UDPAddr
	if src != "" {
		var err error
		if la, err = net.ResolveUDPAddr("udp", src); err != nil {
			return err
		}
	}
	ra, err := net.ResolveUDPAddr("udp", dst)
	if err != nil {
		return err
	}
	return ns.Do(func() error {
		c, err := net.ListenUDP("udp", la)
		if err != nil {
			return err
		}
		defer c.Close()
		for i := 0; i < n; i++ {
			if _, err := c.WriteToUDP(payload, ra); err != nil {
				return err
			}
		}
		return nil
	})
}

// RunIn runs an external command inside ns and returns its combined output.
// The child is forked from the thread Do switched into ns, so it starts in
// that namespace, whatever directory the namespace is mounted in (unlike
// `ip netns exec`, which knows only /var/run/netns). /sys is not remounted:
// tools that read /sys/class/net see the host's view.
func RunIn(ns *Netns, name string, args ...string) ([]byte, error) {
	var out []byte
	err := ns.Do(func() (err error) {
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	return out, err
}

// Run runs an external command inside ns (RunIn) and fails t, with the
// command's output, when it fails: the lab set-up steps of tests (nft, tc).
func Run(t T, ns *Netns, name string, args ...string) {
	t.Helper()
	if out, err := RunIn(ns, name, args...); err != nil {
		t.Fatalf("%s: %s %v: %v\n%s", ns, name, args, err, out)
	}
}

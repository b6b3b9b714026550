package netlab

import (
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Tun creates a tun device (IFF_TUN|IFF_NO_PI: bare IP packets, no
// packet-information header, no link-layer header) called name in ns and
// sets it up. It returns the device's queue: a write into it is one IP
// packet the device receives (it enters ns's stack as ingress on the
// device), a read returns one IP packet the device transmitted. Packets the
// device transmits pile up in the queue (and are then dropped) unless read.
//
// The queue is non-blocking and registered with the runtime poller, so a
// read blocked in another goroutine returns when the file is closed. The
// device is not persistent: closing the file, which the test's cleanup
// does, deletes it.
func Tun(t T, ns *Netns, name string) (*os.File, netlink.Link) {
	t.Helper()
	Require(t)
	var fd int
	// The device is created in the namespace of the thread that opened
	// /dev/net/tun (the queue's socket belongs to it).
	err := ns.Do(func() error {
		var err error
		fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err == nil {
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("netlab: tun %s/%s: %v", ns, name, err)
	}
	f := os.NewFile(uintptr(fd), "tun:"+name)
	t.Cleanup(func() { f.Close() })
	h := mustHandle(t, ns)
	defer h.Close()
	return f, mustUp(t, h, ns, name)
}

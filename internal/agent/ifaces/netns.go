package ifaces

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs fn inside the network namespace bound at nsPath (e.g.
// /var/run/netns/blue, /proc/<pid>/ns/net) and returns its error. With
// nsPath "" it runs fn directly.
//
// fn runs on a fresh goroutine locked to its OS thread; the thread is switched
// into the namespace and back. If switching back fails the thread stays locked
// and is destroyed with the goroutine, so no Go code ever runs on a thread
// left in the wrong namespace. Sockets and BPF links created by fn keep the
// namespace they were made in; goroutines started by fn do not run in it.
// A panic in fn is re-raised in the caller.
func InNetns(nsPath string, fn func() error) error {
	if nsPath == "" {
		return fn()
	}
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", nsPath, err)
	}
	defer unix.Close(fd)
	return InNetnsFd(fd, fn)
}

type nsResult struct {
	err      error
	panicked bool
	panicVal any
	goexit   bool
}

// InNetnsFd is InNetns with an open namespace fd; fd < 0 runs fn directly.
func InNetnsFd(fd int, fn func() error) error {
	if fd < 0 {
		return fn()
	}
	res := make(chan nsResult, 1)
	go func() {
		r := nsResult{goexit: true} // cleared when fn returns or panics
		defer func() { res <- r }()
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			r = nsResult{err: fmt.Errorf("open current netns: %w", err)}
			return
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			unix.Close(orig)
			runtime.UnlockOSThread()
			r = nsResult{err: fmt.Errorf("setns: %w", err)}
			return
		}
		defer func() {
			if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
				r.err = errors.Join(r.err, fmt.Errorf("restore netns (thread discarded): %w", err))
			} else {
				runtime.UnlockOSThread()
			}
			unix.Close(orig)
		}()
		defer func() {
			if p := recover(); p != nil {
				r.panicked, r.panicVal, r.goexit = true, p, false
			}
		}()
		r.err = fn()
		r.goexit = false
	}()
	r := <-res
	switch {
	case r.panicked:
		panic(r.panicVal)
	case r.goexit: // fn called runtime.Goexit (t.FailNow): end the caller too
		runtime.Goexit()
	}
	return r.err
}

// NetnsCookie returns the kernel's cookie of the network namespace bound at
// nsPath ("" for the calling thread's, i.e. the agent's own): the value of
// SO_NETNS_COOKIE on a socket created there (kernel >= 5.14). Cookies are
// never reused while the kernel runs, unlike namespace inode numbers.
//
// This is the namespace's net->net_cookie, the interface identity the
// datapath must report. It is NOT in general what bpf_get_netns_cookie(skb)
// returns in a tc program: that helper gives the namespace of the socket the
// packet carries, which survives a veth crossing (a packet from a socket in
// namespace A reports A at ingress of a device in B), and the initial
// namespace's cookie for packets without a socket (ARP, forwarded traffic).
// So the datapath reads the device's namespace's net_cookie instead (or, in
// its fallback, is given this value per namespace);
// TestNetnsCookieVersusTCHelper pins the helper's behaviour down.
func NetnsCookie(nsPath string) (uint64, error) {
	var c uint64
	err := InNetns(nsPath, func() (err error) {
		c, err = socketNetnsCookie()
		return err
	})
	return c, err
}

func netnsCookieFd(fd int) (uint64, error) {
	var c uint64
	err := InNetnsFd(fd, func() (err error) {
		c, err = socketNetnsCookie()
		return err
	})
	return c, err
}

// socketNetnsCookie reads SO_NETNS_COOKIE from a throw-away AF_UNIX socket,
// which belongs to the calling thread's network namespace and needs no
// protocol to be configured there.
func socketNetnsCookie() (uint64, error) {
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(s)
	c, err := unix.GetsockoptUint64(s, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("getsockopt SO_NETNS_COOKIE (kernel >= 5.14): %w", err)
	}
	return c, nil
}

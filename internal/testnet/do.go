package testnet

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Do runs fn inside the namespace and returns its error. On nil it runs fn
// directly.
//
// fn runs on a fresh goroutine locked to its OS thread, which is switched
// into the namespace and back afterwards. If switching back fails, the thread
// stays locked and dies with the goroutine, so no Go code ever runs later on
// a thread left in the wrong namespace. Sockets created by fn stay in the
// namespace after Do returns; goroutines started by fn do not run in it.
// A panic in fn is re-raised in the caller, and t.FailNow/t.Fatal called in
// fn end the calling goroutine too, as if called there.
func (n *Netns) Do(fn func() error) error {
	if n == nil {
		return fn()
	}
	return inNetns(int(n.Handle), fn)
}

type doResult struct {
	err      error
	panicked bool
	panicVal any
	goexit   bool
}

func inNetns(fd int, fn func() error) error {
	res := make(chan doResult, 1)
	go func() {
		r := doResult{goexit: true} // cleared when fn returns normally
		defer func() { res <- r }()
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			r = doResult{err: fmt.Errorf("open current netns: %w", err)}
			return
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			unix.Close(orig)
			runtime.UnlockOSThread()
			r = doResult{err: fmt.Errorf("setns: %w", err)}
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
	case r.goexit:
		runtime.Goexit()
	}
	return r.err
}

func setLoUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}

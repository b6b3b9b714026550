package ifaces

import "github.com/vishvananda/netlink"

// subscription is a netlink RTNLGRP_LINK subscription in one namespace.
type subscription struct {
	ch   chan netlink.LinkUpdate
	done chan struct{}
}

// subscribe opens the subscription socket inside the watcher's namespace
// with inNetnsFd rather than the library's Namespace option, whose thread
// handling would hand a thread stuck in the namespace back to the scheduler
// if switching back failed.
func (n *nsWatcher) subscribe() (*subscription, error) {
	s := &subscription{ch: make(chan netlink.LinkUpdate, 64), done: make(chan struct{})}
	err := InNetnsFd(n.fd, func() error {
		return netlink.LinkSubscribeWithOptions(s.ch, s.done, netlink.LinkSubscribeOptions{
			ErrorCallback: func(err error) {
				// Called from the library's receive goroutine; a failed
				// receive (ENOBUFS) also closes ch, which run handles.
				n.log.Debug("link subscription", "err", err)
			},
			ReceiveBufferSize: 1 << 20, // fewer ENOBUFS resyncs on bursts
		})
	})
	if err != nil {
		close(s.done) // stops the library's closer goroutine, if it started
		return nil, err
	}
	return s, nil
}

// close releases the socket and waits for the library's receive goroutine:
// closing done closes the socket, which ends the receive loop, which closes
// ch; draining ch meanwhile keeps that goroutine from blocking on a send.
func (s *subscription) close() {
	close(s.done)
	for range s.ch {
	}
}

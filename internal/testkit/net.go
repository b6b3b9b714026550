package testkit

import (
	"net"
	"sync"
	"testing"
)

// FreeAddr is a loopback TCP address whose port is free now, for a server
// that must be given its address before it binds it (or bound twice).
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// SilentListener is a peer that is down the nasty way: it accepts TCP
// connections on a loopback address and never reads or answers (no TLS or
// HTTP/2 handshake), so a client's writes and calls hang until their own
// deadlines. Its connections close when the test ends.
func SilentListener(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

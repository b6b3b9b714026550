package testkit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// reservedPorts is how many ports below the kernel's ephemeral range
// FreeAddr chooses from.
const reservedPorts = 8192

// FreeAddr is a loopback TCP address for a server that must be given its
// address before it binds it (a binary's flag), or that binds it twice (a
// restart). The port is free now and stays reserved to the test until it
// ends.
//
// A port picked by binding port 0 and closing is not enough: the kernel
// may hand it out again at once, to the next such call (a collector once
// got the same port for its gRPC and metrics servers, and failed with
// "address already in use"), to an outgoing connection or to another
// process's port-0 bind, before the server binds it. FreeAddr therefore
// picks from the reservedPorts just below net.ipv4.ip_local_port_range,
// which the kernel never assigns by itself, and holds an
// open-file-description lock on the port's byte of one lock file per
// user, so neither a later call nor a test process running beside it
// picks the same port. The lock goes with the test.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, release, err := reservePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return addr
}

// reservePort locks and checks ports from a random start, so concurrent
// callers rarely contend for the same lock.
func reservePort() (addr string, release func(), err error) {
	low, err := ephemeralLow()
	if err != nil {
		return "", nil, err
	}
	first := low - reservedPorts
	if first < 1024 {
		return "", nil, fmt.Errorf("the ephemeral range starts at %d: no room below it for %d test ports", low, reservedPorts)
	}
	f, err := os.OpenFile(portLockFile(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", nil, err
	}
	start := rand.IntN(reservedPorts)
	for i := range reservedPorts {
		port := first + (start+i)%reservedPorts
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(port), Len: 1}
		if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
				continue // another test holds it
			}
			f.Close()
			return "", nil, fmt.Errorf("lock test port %d: %w", port, err)
		}
		a := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", a)
		if err != nil {
			// In use outside the tests (or by a server of a test
			// that ended): unlock it and go on.
			lk.Type = unix.F_UNLCK
			unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
			continue
		}
		l.Close()
		return a, func() { f.Close() }, nil
	}
	f.Close()
	return "", nil, fmt.Errorf("no free test port in %d–%d", first, low-1)
}

// portLockFile is the lock file of the test ports: one per user, so that
// a file another user created cannot stop the tests.
func portLockFile() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("flowlens-test-ports-%d.lock", os.Getuid()))
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0, fmt.Errorf("ip_local_port_range: unexpected %q", b)
	}
	return strconv.Atoi(fields[0])
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

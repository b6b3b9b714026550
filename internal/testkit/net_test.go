package testkit

import (
	"errors"
	"net"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFreeAddrReserved checks what FreeAddr promises: a port below the
// kernel's ephemeral range, free to bind, locked against every other
// caller (another process opens the lock file on its own, as here) while
// the test runs, and unlocked when it ends.
func TestFreeAddrReserved(t *testing.T) {
	low, err := ephemeralLow()
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(portLockFile(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tryLock := func(port int) error {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: int64(port), Len: 1}
		if err := unix.FcntlFlock(other.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
			return err
		}
		lk.Type = unix.F_UNLCK
		return unix.FcntlFlock(other.Fd(), unix.F_OFD_SETLK, &lk)
	}

	var port int
	seen := map[string]bool{}
	t.Run("held", func(t *testing.T) {
		for range 50 {
			addr := FreeAddr(t)
			if seen[addr] {
				t.Fatalf("%s handed out twice", addr)
			}
			seen[addr] = true
			_, p, _ := net.SplitHostPort(addr)
			port, _ = strconv.Atoi(p)
			if port < low-reservedPorts || port >= low {
				t.Fatalf("port %d outside %d–%d", port, low-reservedPorts, low-1)
			}
			if err := tryLock(port); !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
				t.Fatalf("port %d: a second lock got %v, want EAGAIN", port, err)
			}
			l, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("the reserved address does not bind: %v", err)
			}
			l.Close()
		}
	})
	if err := tryLock(port); err != nil {
		t.Errorf("port %d still locked after its test ended: %v", port, err)
	}
}

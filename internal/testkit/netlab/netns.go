package netlab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/testkit"
)

// DefaultDir is where `ip netns` keeps named namespaces (/var/run/netns is a
// symlink to it on current distributions).
const DefaultDir = "/var/run/netns"

// Prefix starts the name of every namespace this package creates.
const Prefix = "fltest-"

// Netns is a named network namespace: a nsfs bind mount at Path.
type Netns struct {
	Name   string         // file name under Dir, as `ip netns list` shows it
	Dir    string         // directory holding the bind mount
	Path   string         // Dir/Name
	Handle netns.NsHandle // open fd of the namespace; closed by Delete

	once   sync.Once
	delErr error
}

// Require gates the test on root (CAP_SYS_ADMIN, CAP_NET_ADMIN), which
// every helper needs, through testkit.NeedRoot: skipped in short mode or
// outside CI when not root, failed in CI when not root.
func Require(t T) {
	t.Helper()
	if tb, ok := t.(testing.TB); ok {
		testkit.NeedRoot(tb, "network namespaces: CAP_SYS_ADMIN, CAP_NET_ADMIN")
	} else if err := testkit.RootMissing(); err != nil { // a Script: no test to skip
		t.Fatal(err)
	}
}

// NewNetns creates a named namespace under DefaultDir, like `ip netns add`,
// and deletes it when the test ends. name is only a readable hint: the real
// name is "fltest-<name>-<pid>-<random>".
func NewNetns(t T, name string) *Netns {
	t.Helper()
	return NewNetnsIn(t, DefaultDir, name)
}

// NewNetnsIn is NewNetns with the bind mount placed in dir instead, so a test
// can own a whole netns directory (e.g. a t.TempDir()) that nothing else
// writes to. dir is created if missing.
func NewNetnsIn(t T, dir, name string) *Netns {
	t.Helper()
	Require(t)
	ns, err := create(dir, name)
	if err != nil {
		t.Fatalf("netlab: create netns %q in %s: %v", name, dir, err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Errorf("netlab: delete netns %s: %v", ns.Path, err)
		}
	})
	return ns
}

func create(dir, hint string) (*Netns, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	sweepOnce(dir)
	name := fmt.Sprintf("%s%s-%d-%s", Prefix, sanitize(hint), os.Getpid(), randHex(3))
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return nil, err
	}
	f.Close()
	if err := bindNewNetns(path); err != nil {
		os.Remove(path)
		return nil, err
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		unmountRemove(path)
		return nil, err
	}
	ns := &Netns{Name: name, Dir: dir, Path: path, Handle: h}
	// A fresh namespace has lo down; bring it up so 127.0.0.1 works in it.
	// This sends no packet.
	if err := ns.Do(setLoUp); err != nil {
		ns.Delete()
		return nil, err
	}
	return ns, nil
}

// bindNewNetns unshares a new netns on a locked thread, bind-mounts it at
// path and switches the thread back. If switching back fails the thread stays
// locked, so the runtime destroys it with the goroutine instead of reusing it.
func bindNewNetns(path string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		err = unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, "")
		if err != nil {
			err = fmt.Errorf("bind mount: %w", err)
		}
		if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr != nil {
			errc <- errors.Join(err, fmt.Errorf("restore netns (thread discarded): %w", rerr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// Delete closes the handle, unmounts and removes the namespace file. It is
// idempotent; the registered cleanup calls it too. Links that live only in
// the namespace vanish with it once no fd or socket refers to it any more.
func (n *Netns) Delete() error {
	n.once.Do(func() {
		n.Handle.Close()
		n.delErr = unmountRemove(n.Path)
	})
	return n.delErr
}

func unmountRemove(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		err = nil // not a mount point (any more)
	}
	if rmErr := os.Remove(path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		err = errors.Join(err, rmErr)
	}
	return err
}

// String returns the namespace name; "host" for nil.
func (n *Netns) String() string {
	if n == nil {
		return "host"
	}
	return n.Name
}

func sanitize(s string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
	if len(s) > 24 {
		s = s[:24]
	}
	if s == "" {
		s = "ns"
	}
	return s
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

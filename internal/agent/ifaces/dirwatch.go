package ifaces

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// dirWatcher keeps one nsWatcher per selected namespace in NetnsDir. It uses
// inotify on the directory, plus a retry timer for the cases inotify cannot
// see: `ip netns add` creates the file first and bind-mounts the namespace
// onto it a moment later (mounts raise no inotify event), and a NetnsDir
// that does not exist yet (or was removed) is polled every second.
type dirWatcher struct {
	w       *Watcher
	dir     string
	hostIno uint64 // when Host is watched too; a named alias of it is skipped
	emit    func(Event) bool
	synced  func() bool // reports Synced; called once, after the first reconcile
	running map[string]*nsRun
	warned  map[string]bool // names already logged as skipped or failing
	wg      sync.WaitGroup
}

type nsRun struct {
	ino    uint64
	cancel context.CancelCauseFunc
	done   chan struct{}
}

const (
	retryMin = 50 * time.Millisecond
	retryMax = time.Second
)

func (d *dirWatcher) run(ctx context.Context) error {
	in, err := newInotify()
	if err != nil {
		return fmt.Errorf("ifaces: inotify: %w", err)
	}
	changed := make(chan bool, 1) // true: the watch on dir itself was lost
	d.wg.Go(func() { in.read(changed) })
	defer func() {
		in.close() // ends in.read
		for name := range d.running {
			d.stop(name, context.Canceled) // shutting down: no Removed
		}
		d.wg.Wait()
	}()

	watching := in.watch(d.dir) == nil
	retry := time.NewTimer(0)
	defer retry.Stop()
	backoff := retryMin
	first := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case lost := <-changed:
			watching = watching && !lost
			backoff = retryMin
		case <-retry.C:
			if !watching {
				watching = in.watch(d.dir) == nil
			}
		}
		pending := d.reconcile(ctx)
		if first {
			// Every namespace there at start has been listed: each start()
			// emitted its links before returning.
			first = false
			d.synced()
		}
		retry.Stop()
		if pending || !watching {
			retry.Reset(backoff)
			backoff = min(2*backoff, retryMax)
		}
	}
}

// reconcile starts and stops nsWatchers to match the directory. It returns
// true when some entry should be looked at again soon.
func (d *dirWatcher) reconcile(ctx context.Context) (pending bool) {
	entries, err := os.ReadDir(d.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		d.w.log.Warn("read netns dir", "dir", d.dir, "err", err)
		pending = true
	}
	want := map[string]uint64{}
	byIno := map[uint64]string{}
	if d.hostIno != 0 {
		byIno[d.hostIno] = Host
	}
	for _, e := range entries { // sorted by name: aliases resolve stably
		name := e.Name()
		if !d.w.selected(name) {
			continue
		}
		ino, err := pathInode(filepath.Join(d.dir, name))
		if err != nil {
			pending = true // not mounted yet, or being removed
			continue
		}
		if other, dup := byIno[ino]; dup {
			d.warnOnce(name, "netns is an alias, skipped", "same_as", other)
			continue
		}
		byIno[ino] = name
		want[name] = ino
	}
	for _, name := range sortedNames(d.running) {
		if ino, ok := want[name]; !ok || ino != d.running[name].ino {
			d.stop(name, errNetnsGone)
		}
	}
	for _, name := range sortedNames(want) {
		if _, ok := d.running[name]; ok {
			continue
		}
		if err := d.start(ctx, name); err != nil {
			d.warnOnce(name, "cannot watch netns, will retry", "err", err)
			pending = true
		}
	}
	for name := range d.w.names {
		if _, ok := want[name]; !ok && !d.warned[name] {
			d.warnOnce(name, "netns not found, waiting for it", "dir", d.dir)
		}
	}
	return pending
}

func (d *dirWatcher) start(ctx context.Context, name string) error {
	n, sub, err := newNsWatcher(name, filepath.Join(d.dir, name), d.w.filter(), d.emit, d.w.log)
	if err != nil {
		return err
	}
	delete(d.warned, name)
	nctx, cancel := context.WithCancelCause(ctx)
	r := &nsRun{ino: n.ino, cancel: cancel, done: make(chan struct{})}
	d.running[name] = r
	d.wg.Go(func() {
		defer close(r.done)
		n.run(nctx, sub)
	})
	return nil
}

// stop ends a namespace's watcher and waits for it, so its Removed events
// (cause errNetnsGone) precede anything reported after.
func (d *dirWatcher) stop(name string, cause error) {
	r := d.running[name]
	r.cancel(cause)
	<-r.done
	delete(d.running, name)
}

func (d *dirWatcher) warnOnce(name, msg string, args ...any) {
	if d.warned[name] {
		return
	}
	d.warned[name] = true
	d.w.log.Info(msg, append([]any{"netns", name}, args...)...)
}

func pathInode(path string) (uint64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return nsfsInode(fd)
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// inotify wraps a non-blocking inotify fd in an *os.File, so a blocked Read
// is woken by Close through the runtime poller.
type inotify struct {
	f  *os.File
	fd int
}

func newInotify() (*inotify, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return &inotify{f: os.NewFile(uintptr(fd), "inotify"), fd: fd}, nil
}

func (in *inotify) watch(dir string) error {
	_, err := unix.InotifyAddWatch(in.fd, dir, unix.IN_CREATE|unix.IN_DELETE|
		unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_ONLYDIR)
	return err
}

// read signals each batch of events on changed, coalesced: a full rescan
// follows anyway. It returns when the fd is closed.
func (in *inotify) read(changed chan bool) {
	buf := make([]byte, 64*1024)
	for {
		n, err := in.f.Read(buf)
		if err != nil {
			return
		}
		lost := false
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := binary.NativeEndian.Uint32(buf[off+12:])
			if mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
				lost = true
			}
			off += unix.SizeofInotifyEvent + int(nameLen)
		}
		select {
		case changed <- lost:
		default:
			if lost { // make sure a lost watch is not coalesced away
				select {
				case <-changed:
				default:
				}
				changed <- true
			}
		}
	}
}

func (in *inotify) close() { in.f.Close() }

package ifaces

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// Options configure a Watcher.
type Options struct {
	// Allowed reports whether an interface name is wanted; nil allows all,
	// loopback included. It is called from several goroutines at once.
	Allowed func(name string) bool
	// ReportExcluded sends an Excluded event for each interface that
	// appears with a name Allowed refuses.
	ReportExcluded bool
	// ReportSynced sends one Synced event once the interfaces present at
	// start have all been reported, so that a caller knows when its initial
	// state is complete (the agent's readiness).
	ReportSynced bool
	// Netns selects namespaces: Host, All (every named namespace in
	// NetnsDir, now and later), or namespace names in NetnsDir. Empty means
	// Host only. A listed name that does not exist yet is picked up when it
	// appears.
	Netns []string
	// NetnsDir holds the named namespaces; DefaultNetnsDir if empty.
	NetnsDir string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Watcher reports interfaces as they come and go. Build it with New.
type Watcher struct {
	opts  Options
	host  bool
	all   bool
	names map[string]bool
	err   error
	log   *slog.Logger
}

// New builds a Watcher; invalid options are reported by Run.
func New(opts Options) *Watcher {
	w := &Watcher{opts: opts, names: map[string]bool{}, log: opts.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.opts.NetnsDir == "" {
		w.opts.NetnsDir = DefaultNetnsDir
	}
	if len(opts.Netns) == 0 {
		w.host = true
	}
	for _, n := range opts.Netns {
		switch {
		case n == Host:
			w.host = true
		case n == All:
			w.all = true
		case n == "" || n == "." || n == ".." || strings.Contains(n, "/"):
			w.err = fmt.Errorf("ifaces: invalid netns name %q", n)
		default:
			w.names[n] = true
		}
	}
	return w
}

// Run sends Added for every allowed interface present in the selected
// namespaces, then Added and Removed as interfaces appear, are renamed or
// disappear, and as named namespaces are created or deleted. Interfaces that
// are down are reported too.
//
// Run returns nil once ctx is done, after closing every socket and fd it
// opened and ending every goroutine it started; it never closes events.
// It returns an error early only when watching cannot start at all.
func (w *Watcher) Run(ctx context.Context, events chan<- Event) error {
	if w.err != nil {
		return w.err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // runs after cancel: every watcher goroutine has ended
	defer cancel()

	emit := func(ev Event) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}

	var hostIno uint64
	if w.host {
		n, sub, err := newNsWatcher(Host, "", w.filter(), emit, w.log)
		if err != nil {
			return fmt.Errorf("ifaces: watch host netns: %w", err)
		}
		hostIno = n.ino
		wg.Go(func() { n.run(ctx, sub) })
	}
	synced := func() bool { return !w.opts.ReportSynced || emit(Event{Type: Synced}) }
	if !w.all && len(w.names) == 0 {
		if synced() {
			<-ctx.Done()
		}
		return nil
	}
	d := &dirWatcher{
		w: w, dir: w.opts.NetnsDir, hostIno: hostIno, emit: emit, synced: synced,
		running: map[string]*nsRun{}, warned: map[string]bool{},
	}
	return d.run(ctx)
}

func (w *Watcher) selected(name string) bool { return w.all || w.names[name] }

// filter is what a nsWatcher needs of Options: which names to report, and
// whether to report the others as Excluded.
func (w *Watcher) filter() filter {
	return filter{allowed: w.opts.Allowed, reportExcluded: w.opts.ReportExcluded}
}

type filter struct {
	allowed        func(string) bool
	reportExcluded bool
}

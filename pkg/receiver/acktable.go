package receiver

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// DefaultMaxAgentInstances bounds the agent instances whose last applied
// message the server remembers (Options.MaxAgentInstances): every agent
// process start is a new instance, so the table would otherwise grow with
// agent restarts.
const DefaultMaxAgentInstances = 65536

// ackTable is ExportAcked's memory: the highest seq applied for each agent
// instance, at most max instances (the idlest forgotten first), written
// through to a journal file when one is given, so that a collector
// restarted after a SIGKILL still knows what it applied.
type ackTable struct {
	max int
	log *slog.Logger

	mu      sync.Mutex
	entries map[string]*ackEntry
	tick    uint64 // messages seen, the entries' clock

	jmu      sync.Mutex
	journal  *os.File // nil: memory only
	path     string
	line     []byte // reused
	appended int    // records since the last compaction
	lastErr  time.Time
	errs     uint64Counter
}

// ackEntry is the last message applied for one agent instance; mu is held
// while a message of the instance is checked, applied and recorded.
type ackEntry struct {
	mu   sync.Mutex
	last atomic.Uint64 // the highest seq applied (read unlocked by compact)
	seen uint64        // the table's tick at the last message, to forget the idlest first
}

// uint64Counter is where the table counts its journal's write errors
// (Stats.AckStateErrors).
type uint64Counter interface{ Add(uint64) uint64 }

// newAckTable loads the journal at path ("" keeps the table in memory),
// compacts it and keeps it open for appending.
func newAckTable(path string, max int, log *slog.Logger, errs uint64Counter) (*ackTable, error) {
	t := &ackTable{max: max, log: log, entries: map[string]*ackEntry{}, path: path, errs: errs}
	if path == "" {
		return t, nil
	}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("collector: read the acknowledgement state: %w", err)
	}
	for _, ln := range bytes.Split(data, []byte{'\n'}) {
		// "<seq> <instance>"; a line cut by a kill (the last) is skipped.
		sp := bytes.IndexByte(ln, ' ')
		if sp <= 0 {
			continue
		}
		seq, err := strconv.ParseUint(string(ln[:sp]), 10, 64)
		inst := ln[sp+1:]
		if err != nil || len(inst) == 0 || flowpb.CheckAgentInstance(inst) != nil {
			continue
		}
		e := t.entries[string(inst)]
		if e == nil {
			e = &ackEntry{}
			t.entries[string(inst)] = e
		}
		if seq > e.last.Load() {
			e.last.Store(seq)
		}
	}
	for len(t.entries) > max {
		t.forgetIdlest()
	}
	if err := t.compact(); err != nil {
		return nil, err
	}
	return t, nil
}

// lock returns instance's entry, created if new, with its mu held.
func (t *ackTable) lock(instance string) *ackEntry {
	t.mu.Lock()
	e := t.entries[instance]
	if e == nil {
		if len(t.entries) >= t.max {
			t.forgetIdlest()
		}
		e = &ackEntry{}
		t.entries[instance] = e
	}
	t.tick++
	e.seen = t.tick
	t.mu.Unlock()
	e.mu.Lock()
	return e
}

// forgetIdlest drops the entry that went longest without a message.
// Called with t.mu held; runs only when the table is full.
func (t *ackTable) forgetIdlest() {
	var idlest string
	var seen uint64
	for k, e := range t.entries {
		if idlest == "" || e.seen < seen {
			idlest, seen = k, e.seen
		}
	}
	delete(t.entries, idlest)
}

// record appends "seq instance" to the journal: one write(2) per message,
// which a SIGKILL of the collector does not undo (the page cache is the
// kernel's). Compacts the journal once it holds four times more records
// than instances. A failed write is counted and logged (at most every
// 10 s): the message was applied, only its memory across a restart is
// lost.
func (t *ackTable) record(instance string, seq uint64) {
	if t.path == "" {
		return
	}
	t.jmu.Lock()
	defer t.jmu.Unlock()
	if t.journal == nil {
		return
	}
	t.line = strconv.AppendUint(t.line[:0], seq, 10)
	t.line = append(append(append(t.line, ' '), instance...), '\n')
	_, err := t.journal.Write(t.line)
	if err == nil {
		t.appended++
		t.mu.Lock()
		n := len(t.entries)
		t.mu.Unlock()
		if t.appended > 4*max(n, 1024) {
			err = t.compact()
		}
	}
	if err != nil {
		t.errs.Add(1)
		if time.Since(t.lastErr) > 10*time.Second {
			t.lastErr = time.Now()
			t.log.Error("cannot write the acknowledgement state: after a restart, messages applied meanwhile may be applied again", "file", t.path, "error", err)
		}
	}
}

// compact writes the table as a new journal (a temporary file renamed over
// the old one, so a kill leaves one or the other whole) and appends to it
// from then on. Called with t.jmu held, or before the table is shared.
func (t *ackTable) compact() error {
	t.mu.Lock()
	var b bytes.Buffer
	for k, e := range t.entries {
		fmt.Fprintf(&b, "%d %s\n", e.last.Load(), k)
	}
	t.mu.Unlock()
	tmp := t.path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("collector: write the acknowledgement state: %w", err)
	}
	if err := os.Rename(tmp, t.path); err != nil {
		return fmt.Errorf("collector: write the acknowledgement state: %w", err)
	}
	f, err := os.OpenFile(t.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("collector: open the acknowledgement state: %w", err)
	}
	if t.journal != nil {
		t.journal.Close()
	}
	t.journal, t.appended = f, 0
	if d, err := os.Open(filepath.Dir(t.path)); err == nil {
		d.Sync() // the rename itself; a kill does not need it, a host crash would
		d.Close()
	}
	return nil
}

func (t *ackTable) close() {
	t.jmu.Lock()
	defer t.jmu.Unlock()
	if t.journal != nil {
		t.journal.Close()
		t.journal = nil
	}
}

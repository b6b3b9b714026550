package receiver

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

func applied(t *ackTable, inst string, seq uint64) {
	e := t.lock(inst)
	e.last.Store(seq)
	t.record(inst, seq)
	e.mu.Unlock()
}

// The journal keeps the highest seq of every instance across a reopen,
// skips a line a kill cut short, and is compacted to one line per
// instance at open and once it holds four times more records than
// instances (at least 4096).
func TestAckStateJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acks")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var errs atomic.Uint64
	tab, err := newAckTable(path, 100, quiet, &errs)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 3000; seq++ {
		for _, inst := range []string{"a/1", "b/2"} {
			applied(tab, inst, seq)
		}
	}
	data, _ := os.ReadFile(path)
	if n := strings.Count(string(data), "\n"); n >= 6000 || n < 1 {
		t.Fatalf("journal of %d lines after 6000 records: not compacted", n)
	}
	tab.close()
	// A kill in the middle of a line, and a hostile line.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	fmt.Fprintf(f, "99 bad instance\n7")
	f.Close()
	tab, err = newAckTable(path, 100, quiet, &errs)
	if err != nil {
		t.Fatal(err)
	}
	defer tab.close()
	if len(tab.entries) != 2 || tab.entries["a/1"].last.Load() != 3000 || tab.entries["b/2"].last.Load() != 3000 {
		t.Fatalf("reloaded %d entries (a/1 %v, b/2 %v), want 2 at 3000", len(tab.entries), tab.entries["a/1"], tab.entries["b/2"])
	}
	data, _ = os.ReadFile(path)
	if got := strings.Split(strings.TrimSpace(string(data)), "\n"); len(got) != 2 {
		t.Fatalf("journal after open: %q, want one line per instance", got)
	}
	if errs.Load() != 0 {
		t.Fatalf("%d write errors", errs.Load())
	}
}

// At most max instances: a new one makes the one idle longest forgotten.
func TestAckStateMaxInstances(t *testing.T) {
	tab, err := newAckTable("", 2, slog.Default(), new(atomic.Uint64))
	if err != nil {
		t.Fatal(err)
	}
	applied(tab, "a/1", 5)
	applied(tab, "b/1", 5)
	applied(tab, "a/1", 6) // b/1 is now the idlest
	applied(tab, "c/1", 1)
	if _, ok := tab.entries["b/1"]; ok || len(tab.entries) != 2 || tab.entries["a/1"].last.Load() != 6 {
		t.Fatalf("entries after a third instance: %v", tab.entries)
	}
}

package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/datapath/batchread"
)

// Generations is the eviction protocol over the datapath's double buffers,
// in one place: which generation the programs write, the flip, the grace
// period, reading the generation that just ended and emptying the one
// before it. bpf/maps.h is its kernel half.
//
// The programs write the maps of one generation: Control[0] is a counter
// and its parity says which of each pair (Flows, Enrich). Flip (1) empties
// the other flow map, which holds the generation read at the previous flip,
// (2) increments the counter, which makes that map active, and (3) waits
// for an RCU grace period, after which no program can still be writing the
// previous generation (tc and tracing programs run inside RCU read-side
// sections). The ended generation can then be read at leisure: every packet
// is written to exactly one generation, and a generation is read only when
// no program writes it, so nothing is lost or read twice.
//
// The ended flow map stays in place until the next Flip because the TC
// programs look it up: a packet counted on its first interface just before
// a flip is recognised on its next interface after it (docs/design/eviction.md).
// The ended enrichment map is not looked up by any program, so ReadEnrich
// empties it as it reads.
//
// Not safe for concurrent use, except Entries.
type Generations struct {
	maps *Maps
	log  *slog.Logger
	// gen is the counter in Control[0]. It only increases (the RTT hook
	// compares generations, not parities; a uint32 wraps after 2^32
	// evictions, harmless for the parity).
	gen uint32
	// No BPF_F_LOCK: a map is read only after the grace period that follows
	// its flip, when no program writes it any more, so values are whole
	// without their lock, and the read skips a lock/unlock (irqsave/
	// irqrestore) per entry. Measured: docs/benchmarks.md.
	flows  *batchread.Reader[FlowKey, FlowValue]
	enrich *batchread.Reader[FlowKey, EnrichValue]
	outer  *batchread.Reader[FlowKey, TunnelOuterValue] // made on first use (tunnel.go)
	// created is the new-flows counter when the active map became active.
	created atomic.Uint64
	// NoFill turns off the fill tracking behind Entries (one per-CPU
	// counter read per Flip): for users with no pressure check, such as
	// the allocation budget's measurement of the eviction path.
	NoFill bool
}

// NewGenerations takes over the maps' generation counter where it stands.
func NewGenerations(m *Maps, log *slog.Logger) (*Generations, error) {
	if log == nil {
		log = slog.Default()
	}
	g := &Generations{maps: m, log: log,
		flows:  batchread.NewReader[FlowKey, FlowValue](batchread.DefaultChunk, false),
		enrich: batchread.NewReader[FlowKey, EnrichValue](batchread.DefaultChunk, false)}
	if err := m.Control.Lookup(uint32(0), &g.gen); err != nil {
		return nil, fmt.Errorf("read map generation: %w", err)
	}
	return g, nil
}

// Ended is a generation no program writes any more, returned by Flip. Its
// maps are valid until the next Flip.
type Ended struct {
	g   *Generations
	idx uint32 // which map of each pair
	// at is CLOCK_MONOTONIC (bpf_ktime_get_ns's clock) just before the
	// flip: the end of the generation, as the kernel's timestamps see it.
	at time.Duration
}

// FlippedAt is the generation's end on CLOCK_MONOTONIC, the clock of
// bpf_ktime_get_ns (read just before the flip, so a kernel timestamp at or
// before it belongs to the ended generation or an earlier one).
func (e Ended) FlippedAt() time.Duration { return e.at }

// Flip ends the active generation and returns it; see Generations.
func (g *Generations) Flip() (Ended, error) {
	next := (g.gen + 1) & 1
	discard := func([]FlowKey, []FlowValue) error { return nil }
	if _, err := g.flows.ReadAndDelete(g.maps.Flows[next], discard); err != nil {
		return Ended{}, fmt.Errorf("empty flow map %d: %w", next, err)
	}
	// The baseline of the map about to become active is taken before the
	// flip: an insert racing with it is counted (an over-estimate is the
	// safe side for the pressure check), never missed.
	if !g.NoFill {
		if n, err := g.maps.ReadCounter(CounterNewFlows); err == nil {
			g.created.Store(n)
		}
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		return Ended{}, fmt.Errorf("read CLOCK_MONOTONIC: %w", err)
	}
	if err := g.maps.Control.Put(uint32(0), g.gen+1); err != nil {
		return Ended{}, fmt.Errorf("flip flow maps: %w", err)
	}
	ended := Ended{g: g, idx: g.gen & 1, at: time.Duration(now.Nano())}
	g.gen++
	if err := synchronizeRCU(); err != nil {
		// Without the grace period a late write could be missed: wait long
		// enough for any program run instead.
		g.log.Warn("falling back to a sleep", "error", err)
		time.Sleep(50 * time.Millisecond)
	}
	return ended, nil
}

// Maps are the maps whose generations g flips.
func (g *Generations) Maps() *Maps { return g.maps }

// Generation is the counter's current value (the active generation).
func (g *Generations) Generation() uint32 { return g.gen }

// Entries returns the entries of the active flow map: the flows created
// since it became active (it starts empty and nothing deletes from it).
// Safe to call concurrently with Flip.
func (g *Generations) Entries() (uint64, error) {
	n, err := g.maps.ReadCounter(CounterNewFlows)
	if err != nil {
		return 0, err
	}
	return n - g.created.Load(), nil
}

// ReadFlows reads the ended flow map in chunks; fn must not keep the slices.
func (e Ended) ReadFlows(fn func(keys []FlowKey, vals []FlowValue) error) (int, error) {
	n, err := e.g.flows.Read(e.g.maps.Flows[e.idx], fn)
	if err != nil {
		return n, fmt.Errorf("read flow map %d: %w", e.idx, err)
	}
	return n, nil
}

// ReadEnrich reads and empties the ended enrichment map in chunks; fn must
// not keep the slices.
func (e Ended) ReadEnrich(fn func(keys []FlowKey, vals []EnrichValue) error) (int, error) {
	n, err := e.g.enrich.ReadAndDelete(e.g.maps.Enrich[e.idx], fn)
	if err != nil {
		return n, fmt.Errorf("read enrichment map %d: %w", e.idx, err)
	}
	return n, nil
}

// membarrierCmdGlobal is MEMBARRIER_CMD_GLOBAL (include/uapi/linux/membarrier.h).
const membarrierCmdGlobal = 1

var errSync = errors.New("wait for RCU grace period")

// synchronizeRCU waits until every BPF program that started before the call
// has finished: membarrier(MEMBARRIER_CMD_GLOBAL) is synchronize_rcu() in the
// kernel, and tc and tracing programs run inside RCU read-side sections.
func synchronizeRCU() error {
	_, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0)
	if errno != 0 {
		return fmt.Errorf("%w: membarrier: %v", errSync, errno)
	}
	return nil
}

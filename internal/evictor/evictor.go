package evictor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/datapath"
	"github.com/flowlens/flowlens/internal/maps"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Eviction reasons (the "reason" label of the evictions metric).
const (
	ReasonTimer    = "timer"
	ReasonPressure = "pressure"
	ReasonShutdown = "shutdown"
)

// EvictorConfig configures an Evictor.
type EvictorConfig struct {
	Maps     datapath.Maps
	MaxFlows uint32
	Period   time.Duration // cache-active-timeout
	// PressureFill is the fraction of MaxFlows new flows at which an
	// eviction starts before the period ends (default 0.8).
	PressureFill float64
	Sampling     uint32
	BatchSize    int // records per batch handed to Sink (default 1000)
	Resolver     *Resolver
	// Sink receives each batch with one reference, which it owns: it must
	// Release it once (directly, or through the consumers it Retains it
	// for) and must not modify the records. Sink may block until until, to
	// make the Evictor wait for slower consumers instead of buffering a whole
	// eviction (the maps it reads are no longer written, so the kernel side
	// does not wait); past until it must not block.
	Sink func(b *flow.Batch, until time.Time)
	// ExportWait bounds how long one eviction may wait in Sink, in total
	// (default Period/2): a consumer that is slower than that loses batches
	// (its queue drops them, counted) rather than holding up evictions.
	ExportWait time.Duration
	// Counters reads the datapath's per-CPU counters.
	Counters func() ([datapath.FlowsCounterCNT_MAX]uint64, error)
	// Enrichment makes the evictor read Maps.Enrich and merge it by key.
	Enrichment bool
	// Names resolves drop reasons and TCP states (nil: numbers).
	Names  Names
	Logger *slog.Logger
}

// Names resolves kernel enum values to names (datapath.Names implements it).
type Names interface {
	DropReason(uint32) string
	TCPState(uint8) string
}

// EvictorStats are cumulative counts, safe to read concurrently.
type EvictorStats struct {
	Evictions     [3]atomic.Uint64 // timer, pressure, shutdown
	Flows         atomic.Uint64    // records produced from the flow maps
	OverflowFlows atomic.Uint64    // records produced from overflow records
	PartialFlows  atomic.Uint64    // enrichment entries with no flow entry
	LastDuration  atomic.Int64     // ns
}

// Evictor periodically moves the flows out of the kernel into Records.
//
// The datapath writes one of two flow maps: Control[0] is a generation
// counter, and its parity says which. An eviction (1) empties the other
// map, which holds the generation exported last time, (2) makes it the
// active one by incrementing the counter, (3) waits for an RCU grace period,
// after which no program can still be writing the previous map, and (4)
// reads the previous map at leisure. The previous generation stays readable
// by the programs until the next eviction: a packet counted on its first
// interface just before a flip is recognised on its next interface after it.
type Evictor struct {
	cfg    EvictorConfig
	log    *slog.Logger
	reader *maps.Reader[datapath.FlowsFlowKey, datapath.FlowsFlowValue]
	enrich *maps.Reader[datapath.FlowsFlowKey, datapath.EnrichEnrichValue]
	// pending holds the enrichment entries of the eviction in progress until
	// they are merged into their flow; reused, so steady state allocates nothing.
	pending map[datapath.FlowsFlowKey]datapath.EnrichEnrichValue
	names   nameCache  // reused by every eviction
	pool    *flow.Pool // the record batches handed to Sink
	// gen is the generation in Control[0]; gen&1 indexes the active maps.
	// Only increases (the RTT hook compares generations, not parities; a
	// uint32 wraps after 2^32 evictions, harmless for the parity, and a
	// false RTT skip would need a socket idle across exactly 2^32 of them).
	gen    uint32
	over   *overflowAgg
	ring   *ringbuf.Reader
	ringWG sync.WaitGroup

	lastCreated atomic.Uint64 // the new-flows counter when the active map became active
	Stats       EvictorStats
	// OnEviction, when set, is called after each eviction.
	OnEviction func(reason string, flows int, d time.Duration)
}

// NewEvictor prepares an Evictor; Run starts it.
func NewEvictor(cfg EvictorConfig) (*Evictor, error) {
	if cfg.PressureFill <= 0 || cfg.PressureFill > 1 {
		cfg.PressureFill = 0.8
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.Sampling == 0 {
		cfg.Sampling = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Resolver == nil {
		cfg.Resolver = NewResolver()
	}
	if cfg.ExportWait <= 0 {
		cfg.ExportWait = cfg.Period / 2
	}
	e := &Evictor{cfg: cfg, log: cfg.Logger, over: newOverflowAgg(), pool: flow.NewPool(cfg.BatchSize),
		// No BPF_F_LOCK: the Evictor reads a flow map only after the RCU
		// grace period that follows the flip, when no program writes it any
		// more (programs only look up the previous generation), so values
		// are whole without their lock, and the read skips a lock/unlock
		// (irqsave/irqrestore) per entry. Measured: docs/benchmarks.md.
		reader:  maps.NewReader[datapath.FlowsFlowKey, datapath.FlowsFlowValue](maps.DefaultChunk, false),
		enrich:  maps.NewReader[datapath.FlowsFlowKey, datapath.EnrichEnrichValue](maps.DefaultChunk, false),
		pending: map[datapath.FlowsFlowKey]datapath.EnrichEnrichValue{}}
	if err := cfg.Maps.Control.Lookup(uint32(0), &e.gen); err != nil {
		return nil, fmt.Errorf("read map generation: %w", err)
	}
	if cfg.Maps.Overflow != nil {
		rd, err := ringbuf.NewReader(cfg.Maps.Overflow)
		if err != nil {
			return nil, fmt.Errorf("open overflow ring buffer: %w", err)
		}
		e.ring = rd
		e.ringWG.Add(1)
		go e.readOverflow()
	}
	return e, nil
}

func (e *Evictor) readOverflow() {
	defer e.ringWG.Done()
	var rec ringbuf.Record
	for {
		err := e.ring.ReadInto(&rec)
		if err != nil {
			if errors.Is(err, ringbuf.ErrFlushed) || errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			e.log.Warn("reading overflow ring buffer", "error", err)
			continue
		}
		if len(rec.RawSample) < int(unsafe.Sizeof(datapath.FlowsOverflowRec{})) {
			continue
		}
		r := (*datapath.FlowsOverflowRec)(unsafe.Pointer(&rec.RawSample[0]))
		e.over.add(r)
	}
}

// Run evicts every Period, and early under pressure, until ctx is done. It
// does not evict on return: call Shutdown once the programs are detached.
func (e *Evictor) Run(ctx context.Context) error {
	period := time.NewTicker(e.cfg.Period)
	defer period.Stop()
	pressure := time.NewTicker(min(e.cfg.Period/4, 250*time.Millisecond))
	defer pressure.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-period.C:
			if err := e.Evict(ReasonTimer); err != nil {
				e.log.Error("eviction failed", "error", err)
			}
		case <-pressure.C:
			if e.underPressure() {
				if err := e.Evict(ReasonPressure); err != nil {
					e.log.Error("eviction failed", "error", err)
				}
				period.Reset(e.cfg.Period)
			}
		}
	}
}

// underPressure reports whether the active map is nearly full (new flows
// since the last flip) or has already overflowed.
func (e *Evictor) underPressure() bool {
	if e.cfg.Counters == nil {
		return false
	}
	c, err := e.cfg.Counters()
	if err != nil {
		return false
	}
	created := c[datapath.FlowsCounterCNT_NEW_FLOWS] - e.lastCreated.Load()
	return float64(created) >= e.cfg.PressureFill*float64(e.cfg.MaxFlows)
}

// ActiveFlows returns the entries of the active flow map: the flows created
// since it became active (it starts empty and nothing deletes from it).
func (e *Evictor) ActiveFlows() (uint64, error) {
	c, err := e.cfg.Counters()
	if err != nil {
		return 0, err
	}
	return c[datapath.FlowsCounterCNT_NEW_FLOWS] - e.lastCreated.Load(), nil
}

// Shutdown drains the overflow ring buffer, evicts everything that is left
// and stops. Call it after the programs are detached.
func (e *Evictor) Shutdown() error {
	if e.ring != nil {
		e.ring.Flush() // ReadInto returns every pending record, then ErrFlushed
		e.ringWG.Wait()
		e.ring.Close()
		e.ring = nil
	}
	return e.Evict(ReasonShutdown)
}

// membarrierCmdGlobal is MEMBARRIER_CMD_GLOBAL (include/uapi/linux/membarrier.h).
const membarrierCmdGlobal = 1

var errSync = errors.New("wait for RCU grace period")

// synchronizeRCU waits until every BPF program that started before the call
// has finished: membarrier(MEMBARRIER_CMD_GLOBAL) is synchronize_rcu() in the
// kernel, and tc programs run inside RCU read-side sections.
func synchronizeRCU() error {
	_, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0)
	if errno != 0 {
		return fmt.Errorf("%w: membarrier: %v", errSync, errno)
	}
	return nil
}

// Evict runs one eviction cycle. Not safe for concurrent use (Run and
// Shutdown call it from one goroutine at a time).
func (e *Evictor) Evict(reason string) error {
	start := time.Now()
	m := e.cfg.Maps
	nextGen := e.gen + 1
	next := nextGen & 1
	discard := func([]datapath.FlowsFlowKey, []datapath.FlowsFlowValue) error { return nil }
	if _, err := e.reader.ReadAndDelete(m.Flows[next], discard); err != nil {
		return fmt.Errorf("empty flow map %d: %w", next, err)
	}
	// Baseline for the fill of the map about to become active, taken before
	// the flip: an insert racing with it is counted (an over-estimate is the
	// safe side for the pressure check), never missed.
	if e.cfg.Counters != nil {
		if c, err := e.cfg.Counters(); err == nil {
			e.lastCreated.Store(c[datapath.FlowsCounterCNT_NEW_FLOWS])
		}
	}
	if err := m.Control.Put(uint32(0), nextGen); err != nil {
		return fmt.Errorf("flip flow maps: %w", err)
	}
	prev := e.gen & 1
	e.gen = nextGen
	if err := synchronizeRCU(); err != nil {
		// Without the grace period a late write could be missed: wait long
		// enough for any tc program run instead.
		e.log.Warn("falling back to a sleep", "error", err)
		time.Sleep(50 * time.Millisecond)
	}
	if e.cfg.Enrichment && m.Enrich[prev] != nil {
		clear(e.pending)
		_, err := e.enrich.ReadAndDelete(m.Enrich[prev], func(keys []datapath.FlowsFlowKey, vals []datapath.EnrichEnrichValue) error {
			for i := range keys {
				e.pending[keys[i]] = vals[i]
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read enrichment map %d: %w", prev, err)
		}
	}

	out := e.newOutput(reason)
	_, err := e.reader.Read(m.Flows[prev], func(keys []datapath.FlowsFlowKey, vals []datapath.FlowsFlowValue) error {
		for i := range keys {
			out.add(&keys[i], &vals[i])
		}
		return nil
	})
	e.Stats.Flows.Add(uint64(out.n))
	if err != nil {
		out.flush()
		return fmt.Errorf("read flow map %d: %w", prev, err)
	}
	for k, f := range e.over.take() {
		out.add(&k, &f.v)
		e.Stats.OverflowFlows.Add(1)
	}
	// Enrichment entries without a flow entry: partial records.
	now := time.Now()
	for k, ev := range e.pending {
		r := out.next()
		r.Sampling, r.Partial, r.StartTime, r.EndTime = e.cfg.Sampling, true, now, now
		fillKey(r, &k)
		e.applyEnrich(r, &ev)
		e.Stats.PartialFlows.Add(1)
		out.done()
	}
	clear(e.pending)
	out.flush()
	n := out.n
	e.cfg.Resolver.Tick()
	d := time.Since(start)
	e.Stats.LastDuration.Store(int64(d))
	switch reason {
	case ReasonTimer:
		e.Stats.Evictions[0].Add(1)
	case ReasonPressure:
		e.Stats.Evictions[1].Add(1)
	case ReasonShutdown:
		e.Stats.Evictions[2].Add(1)
	}
	if e.OnEviction != nil {
		e.OnEviction(reason, n, d)
	}
	return nil
}

// output fills batches with one eviction's records and hands them to the
// Sink as they fill up.
type output struct {
	e     *Evictor
	b     *flow.Batch
	clk   Clock
	names *nameCache
	until time.Time // the Sink may wait until then
	n     int       // records produced
}

func (e *Evictor) newOutput(reason string) *output {
	o := &output{e: e, clk: NewClock(), names: &e.names}
	o.names.reset(e.cfg.Resolver)
	o.until = time.Now().Add(e.cfg.ExportWait)
	if reason == ReasonShutdown {
		// The last eviction may use the whole export wait: nothing follows it.
		o.until = time.Now().Add(max(e.cfg.ExportWait, 5*time.Second))
	}
	return o
}

// next returns a zeroed record at the end of the current batch; call done
// once it is filled.
func (o *output) next() *flow.Record {
	if o.b == nil {
		o.b = o.e.pool.Get()
	}
	o.n++
	return o.b.Next()
}

// done hands the batch on once it is full.
func (o *output) done() {
	if o.b.Full() {
		o.flush()
	}
}

func (o *output) flush() {
	if o.b == nil {
		return
	}
	if o.b.Len() == 0 {
		o.b.Release()
	} else {
		o.e.cfg.Sink(o.b, o.until)
	}
	o.b = nil
}

// add converts one flow map entry and merges its enrichment entry, if any.
func (o *output) add(k *datapath.FlowsFlowKey, v *datapath.FlowsFlowValue) {
	r := o.next()
	r.Sampling = o.e.cfg.Sampling
	fromValue(r, k, v, o.clk, o.names, o.b)
	if pending := o.e.pending; len(pending) > 0 {
		if ev, ok := pending[*k]; ok {
			o.e.applyEnrich(r, &ev)
			delete(pending, *k)
		}
	}
	o.done()
}

func (e *Evictor) applyEnrich(r *flow.Record, v *datapath.EnrichEnrichValue) {
	r.DropPackets = v.DropPackets
	r.DropBytes = v.DropBytes
	r.DropTCPFlags = v.DropTcpFlags
	r.RTT = time.Duration(v.RttNs)
	r.RTTMax = time.Duration(v.RttMaxNs)
	r.Retransmits = v.Retransmits
	if v.DropPackets > 0 {
		if e.cfg.Names != nil {
			r.DropCause = e.cfg.Names.DropReason(v.DropCause)
			r.DropTCPState = e.cfg.Names.TCPState(v.DropTcpState)
		} else {
			r.DropCause = strconv.FormatUint(uint64(v.DropCause), 10)
		}
	}
}

package flow

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

	"github.com/flowlens/flowlens/pkg/datapath"
	"github.com/flowlens/flowlens/pkg/maps"
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
	// Sink receives each batch; it must not block (exporters queue it) and
	// must not modify it. Batches are never reused by the Evictor.
	Sink func([]Record)
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
// The datapath writes one of two flow maps (Control[0] says which). An
// eviction (1) empties the other map, which holds the generation exported
// last time, (2) makes it the active one, (3) waits for an RCU grace period,
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
	active  uint32
	over    *overflowAgg
	ring    *ringbuf.Reader
	ringWG  sync.WaitGroup

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
	e := &Evictor{cfg: cfg, log: cfg.Logger, over: newOverflowAgg(),
		reader:  maps.NewReader[datapath.FlowsFlowKey, datapath.FlowsFlowValue](maps.DefaultChunk, true),
		enrich:  maps.NewReader[datapath.FlowsFlowKey, datapath.EnrichEnrichValue](maps.DefaultChunk, false),
		pending: map[datapath.FlowsFlowKey]datapath.EnrichEnrichValue{}}
	var cur uint32
	if err := cfg.Maps.Control.Lookup(uint32(0), &cur); err != nil {
		return nil, fmt.Errorf("read active flow map: %w", err)
	}
	e.active = cur
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
	next := 1 - e.active
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
	if err := m.Control.Put(uint32(0), next); err != nil {
		return fmt.Errorf("flip flow maps: %w", err)
	}
	prev := e.active
	e.active = next
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

	clk := NewClock()
	b := e.newBatch()
	n := 0
	_, err := e.reader.Read(m.Flows[prev], func(keys []datapath.FlowsFlowKey, vals []datapath.FlowsFlowValue) error {
		for i := range keys {
			b.add(&keys[i], &vals[i], clk)
			n++
			if b.full() {
				e.cfg.Sink(b.recs)
				b = e.newBatch()
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read flow map %d: %w", prev, err)
	}
	e.Stats.Flows.Add(uint64(n))
	for k, f := range e.over.take() {
		b.add(&k, &f.v, clk)
		e.Stats.OverflowFlows.Add(1)
		n++
		if b.full() {
			e.cfg.Sink(b.recs)
			b = e.newBatch()
		}
	}
	// Enrichment entries without a flow entry: partial records.
	now := time.Now()
	for k, ev := range e.pending {
		b.recs = b.recs[:len(b.recs)+1]
		r := &b.recs[len(b.recs)-1]
		*r = Record{Sampling: e.cfg.Sampling, Partial: true, StartTime: now, EndTime: now}
		fillKey(r, &k)
		e.applyEnrich(r, &ev)
		e.Stats.PartialFlows.Add(1)
		n++
		if b.full() {
			e.cfg.Sink(b.recs)
			b = e.newBatch()
		}
	}
	clear(e.pending)
	if len(b.recs) > 0 {
		e.cfg.Sink(b.recs)
	}
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

// batch is one slice of Records with the backing array of their Interfaces:
// two allocations per batch, none per flow.
type batch struct {
	e    *Evictor
	recs []Record
	ifs  []Interface
}

func (e *Evictor) newBatch() *batch {
	return &batch{e: e, recs: make([]Record, 0, e.cfg.BatchSize),
		ifs: make([]Interface, 0, e.cfg.BatchSize*2)}
}

func (b *batch) full() bool { return len(b.recs) == cap(b.recs) }

func (b *batch) add(k *datapath.FlowsFlowKey, v *datapath.FlowsFlowValue, clk Clock) {
	if len(b.ifs)+len(v.Ifaces) > cap(b.ifs) {
		// Out of backing space (many multi-interface flows): a new array;
		// records already carved keep pointing at the old one.
		b.ifs = make([]Interface, 0, cap(b.ifs))
	}
	b.recs = b.recs[:len(b.recs)+1]
	r := &b.recs[len(b.recs)-1]
	*r = Record{Sampling: b.e.cfg.Sampling}
	b.ifs = fromValue(r, k, v, clk, b.e.cfg.Resolver, b.ifs)
	if len(b.e.pending) > 0 {
		if ev, ok := b.e.pending[*k]; ok {
			b.e.applyEnrich(r, &ev)
			delete(b.e.pending, *k)
		}
	}
}

func (e *Evictor) applyEnrich(r *Record, v *datapath.EnrichEnrichValue) {
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

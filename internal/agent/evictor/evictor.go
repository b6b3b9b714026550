// Package evictor turns the kernel's flow and enrichment maps into batches
// of flow records: every --cache-active-timeout (or early, when the active
// map fills up) it ends the datapath's current generation
// (datapath.Generations), converts the ended generation's entries into
// pkg/flow records (names resolved, clocks converted), merges each flow
// with its enrichment entry through the running features, adds the
// packets that overflowed into the ring buffer, and hands the records on
// in recycled batches to a Sink.
package evictor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Eviction reasons (the "reason" label of the evictions metric).
const (
	ReasonTimer    = "timer"
	ReasonPressure = "pressure"
	ReasonShutdown = "shutdown"
)

// A Sink receives the evictor's batches: the export queues
// (exporter.Fanout), or anything else that consumes records.
type Sink interface {
	// Push takes over one reference to b: it must Release it once
	// (directly, or through the consumers it Retains it for) and must not
	// modify the records. Push may block, which makes the evictor wait for
	// slower consumers instead of buffering a whole eviction (the maps it
	// reads are no longer written, so the kernel side does not wait). All
	// the Pushes of one eviction get the same until: until minus the
	// eviction's start is the wait budget of each consumer (ExportWait);
	// a consumer that has spent its budget must not block.
	Push(b *flow.Batch, until time.Time)
}

// SinkFunc adapts a function to a Sink (tests, benchmarks, embedders).
type SinkFunc func(b *flow.Batch, until time.Time)

// Push calls f.
func (f SinkFunc) Push(b *flow.Batch, until time.Time) { f(b, until) }

// An Observer is told about every eviction (the agent's metrics).
type Observer interface {
	ObserveEviction(reason string, flows int, d time.Duration)
}

// Config configures an Evictor.
type Config struct {
	// Generations is the datapath's eviction protocol (flip, grace period,
	// reads); Overflow its ring buffer of packets that found the map full
	// (nil: none).
	Generations *datapath.Generations
	Overflow    *ebpf.Map
	// Clock converts the datapath's timestamps (jiffies) to wall time.
	Clock    *datapath.Clock
	MaxFlows uint32
	Period   time.Duration // cache-active-timeout
	// PressureFill is the fraction of MaxFlows new flows at which an
	// eviction starts before the period ends (default 0.8).
	PressureFill float64
	Sampling     uint32
	// OverflowMaxFlows bounds the flows aggregated from the overflow ring
	// buffer in one period (default DefaultOverflowMaxFlows): the records
	// of further flows are dropped and their packets counted in
	// Stats.LostPackets.
	OverflowMaxFlows int
	// Rates are the sampling rates of the flow filter's rules by
	// FlowValue.Rule (0: the default action's, Sampling); nil without rules.
	Rates     []uint32
	BatchSize int // records per batch handed to the Sink (default 1000)
	Resolver  *Resolver
	Sink      Sink
	// Observer, when set, is told about each eviction.
	Observer Observer
	// Stats, when set, is where the evictor counts (so the metrics can be
	// built before the evictor); else Evictor.Stats points to its own.
	Stats *Stats
	// ExportWait bounds how long one eviction may wait in Sink for each
	// consumer (default Period/2): a consumer that is slower than that
	// loses batches (its queue drops them, counted) rather than holding up
	// evictions, and spends only its own budget (exporter.Fanout).
	ExportWait time.Duration
	// Features are the running enrichment features: the evictor reads the
	// enrichment maps when there is at least one, and each fills its
	// fields of the records with an enrichment entry.
	Features []feature.Feature
	// OverlayOuter reads the tunnel flows (--overlay-outer-flows,
	// bpf/tunnel.h) into records marked Tunnel.OverlayOuter (tunnel.go).
	OverlayOuter bool
	Logger       *slog.Logger
}

// Stats are cumulative counts, safe to read concurrently.
type Stats struct {
	Evictions     [3]atomic.Uint64 // timer, pressure, shutdown
	Flows         atomic.Uint64    // records produced from the flow maps
	OverflowFlows atomic.Uint64    // records produced from overflow records
	PartialFlows  atomic.Uint64    // enrichment entries with no flow entry
	OuterFlows    atomic.Uint64    // tunnel flows' records (Config.OverlayOuter), marked OverlayOuter
	LastDuration  atomic.Int64     // ns
	// ReadFailures counts evictions whose read of an ended generation
	// failed after the flip: the generation was kept, and the next
	// eviction reads what was not exported before it flips again.
	ReadFailures atomic.Uint64
	// LostPackets are packets the kernel handed on and the evictor could
	// not account for because a memory bound was reached, by reason
	// (LostReasons); LostRecords the overflow records that carried them
	// (with the sightings that would not have counted).
	LostPackets [len(LostReasons)]atomic.Uint64
	LostRecords [len(LostReasons)]atomic.Uint64
}

// The reasons of Stats.LostPackets (the "reason" label of the lost
// packets metric), by index.
const (
	// LostOverflowAggregationFull: an overflow record of a flow the
	// overflow aggregation does not hold, found it holding
	// Config.OverflowMaxFlows flows.
	LostOverflowAggregationFull = iota
)

// LostReasons are the reasons' label values, in Stats.LostPackets' order.
var LostReasons = [...]string{LostOverflowAggregationFull: "overflow_aggregation_full"}

// DefaultOverflowMaxFlows bounds the overflow aggregation when
// Config.OverflowMaxFlows is unset (the agent derives it from its memory
// limit: internal/agent/memory.go).
const DefaultOverflowMaxFlows = 100_000

// OverflowEntryBytes bounds the heap one flow of the overflow aggregation
// costs: its compact entry and its index slot, two periods' worth
// (TestOverflowEntryBytes measures it; 640 when each flow was a FlowValue
// behind a pointer in three maps). The agent sizes OverflowMaxFlows with
// it when its memory limit is the smaller bound.
const OverflowEntryBytes = 352

// Evictor periodically moves the flows out of the kernel into records.
type Evictor struct {
	cfg  Config
	log  *slog.Logger
	gens *datapath.Generations
	// pending indexes, by key, the enrichment entries of the eviction in
	// progress (in enrichVals) until they are merged into their flow. Both
	// are reused, so steady state allocates nothing; the values stay in a
	// slice so the features get a pointer to them without a copy escaping.
	pending    map[datapath.FlowKey]int32
	enrichVals []datapath.EnrichValue
	via        viaFold             // feature xlat's aliases that count for their flow (xlat.go)
	names      nameCache           // reused by every eviction
	annotators []feature.Annotator // the Features that annotate every record
	pool       *flow.Pool          // the record batches handed to the Sink
	over       *overflowAgg
	ring       *ringbuf.Reader
	ringWG     sync.WaitGroup
	// unread is the generation being read, kept when its read fails after
	// the flip (see Evict); unreadFlows counts its flow entries handed on.
	unread      datapath.Ended
	unreadFlows int
	kept        bool // unread is a generation whose read failed
	// lostLogged is Stats.LostPackets when the last "lost at a bound" line
	// was logged, at lostLogAt (at most one line a minute).
	lostLogged [len(LostReasons)]uint64
	lostLogAt  time.Time
	// swept says the features' Sweep ran for unread (once per generation,
	// even when its read is retried).
	swept bool
	// Stats are the evictor's cumulative counts (Config.Stats, or its own).
	Stats *Stats
}

// New prepares an Evictor; Run starts it.
func New(cfg Config) (*Evictor, error) {
	if cfg.Generations == nil || cfg.Sink == nil {
		return nil, errors.New("evictor: Generations and Sink are required")
	}
	if cfg.Clock == nil {
		return nil, errors.New("evictor: Clock is required")
	}
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
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	e := &Evictor{Stats: cfg.Stats, cfg: cfg, log: cfg.Logger, gens: cfg.Generations, over: newOverflowAgg(cfg.OverflowMaxFlows, cfg.Stats),
		pool: flow.NewPool(cfg.BatchSize), pending: map[datapath.FlowKey]int32{}}
	for _, f := range cfg.Features {
		if a, ok := f.(feature.Annotator); ok {
			e.annotators = append(e.annotators, a)
		}
	}
	if cfg.Overflow != nil {
		rd, err := ringbuf.NewReader(cfg.Overflow)
		if err != nil {
			return nil, fmt.Errorf("open overflow ring buffer: %w", err)
		}
		e.ring = rd
		e.ringWG.Add(1)
		go e.readOverflow()
	}
	return e, nil
}

// ringPoll is how long a record may wait in the overflow ring for the
// reader: the programs wake it only each time the unread data passes a
// quarter of the ring (bpf/full.h, overflow_wake), not for every record of a
// reader that keeps up, so it also reads whatever is there this often.
const ringPoll = 50 * time.Millisecond

func (e *Evictor) readOverflow() {
	defer e.ringWG.Done()
	var rec ringbuf.Record
	e.ring.SetDeadline(time.Now().Add(ringPoll))
	for {
		err := e.ring.ReadInto(&rec)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// Every record that was there has been read.
				e.ring.SetDeadline(time.Now().Add(ringPoll))
				continue
			}
			if errors.Is(err, ringbuf.ErrFlushed) || errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			e.log.Warn("reading overflow ring buffer", "error", err)
			continue
		}
		if len(rec.RawSample) < int(unsafe.Sizeof(datapath.OverflowRec{})) {
			continue
		}
		e.over.add((*datapath.OverflowRec)(unsafe.Pointer(&rec.RawSample[0])))
	}
}

// pressurePoll is how often Run compares the active map's new flows with
// PressureFill (or a quarter of the period), and pressurePollFast how often
// once a check found the map at half of PressureFill or more. A flood of
// new flows fills a 100,000-entry map in a third of a second at 300,000 a
// second: a check every 250 ms found it at 75 % and then full, 170 ms of
// new flows later, all of them in the overflow aggregation; every 25 ms
// the eviction starts at 80 %, before the map fills. Checking every 25 ms
// always cost an idle agent 6 ms of CPU a second (a per-CPU counter read
// and a wake-up): only a map half way to the pressure fill is checked
// that often.
const (
	pressurePoll     = 250 * time.Millisecond
	pressurePollFast = 25 * time.Millisecond
)

// Run evicts every Period, and early under pressure, until ctx is done. It
// does not evict on return: call Shutdown once the programs are detached.
func (e *Evictor) Run(ctx context.Context) error {
	period := time.NewTicker(e.cfg.Period)
	defer period.Stop()
	slow := min(e.cfg.Period/4, pressurePoll)
	fast := min(slow, pressurePollFast)
	pressure := time.NewTimer(slow)
	defer pressure.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-period.C:
			if err := e.Evict(ReasonTimer); err != nil {
				e.log.Error("eviction failed", "error", err)
			}
		case <-e.over.wake: // the overflow aggregation is half full
			if err := e.Evict(ReasonPressure); err != nil {
				e.log.Error("eviction failed", "error", err)
			}
			period.Reset(e.cfg.Period)
		case <-pressure.C:
			fill := e.fill()
			if fill >= e.cfg.PressureFill {
				if err := e.Evict(ReasonPressure); err != nil {
					e.log.Error("eviction failed", "error", err)
				}
				period.Reset(e.cfg.Period)
			}
			if fill >= e.cfg.PressureFill/2 {
				pressure.Reset(fast)
			} else {
				pressure.Reset(slow)
			}
		}
	}
}

// fill is the active map's fill (new flows since the last flip over
// MaxFlows; 0 when it cannot be read).
func (e *Evictor) fill() float64 {
	n, err := e.gens.Entries()
	if err != nil {
		return 0
	}
	return float64(n) / float64(e.cfg.MaxFlows)
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
	err := e.Evict(ReasonShutdown)
	e.summary()
	// The features' own readers (dns's ring of answers), read by that
	// last eviction's sweep.
	for _, f := range e.cfg.Features {
		if c, ok := f.(io.Closer); ok {
			c.Close()
		}
	}
	return err
}

// summary logs, once at shutdown, the records the evictions produced and
// the packets lost before them (the kernel's overflow counters, the
// evictor's memory bounds) and the failed reads: with each exporter's
// "exporter stopped" line, the agent's last word on every packet once its
// metrics are no longer scraped. The lost packets line (logLost) comes at
// most once a minute, so a short-lived agent may never have written it.
func (e *Evictor) summary() {
	st := e.Stats
	args := []any{"flows", st.Flows.Load(), "overflow_flows", st.OverflowFlows.Load(), "partial_flows", st.PartialFlows.Load(),
		"outer_flows", st.OuterFlows.Load(), "read_failures", st.ReadFailures.Load()}
	for i, reason := range LostReasons {
		args = append(args, "lost_packets_"+reason, st.LostPackets[i].Load())
	}
	if c, err := e.gens.Maps().ReadCounters(); err == nil {
		args = append(args, "overflow_records", c[datapath.CounterOverflowRecords], "overflow_lost", c[datapath.CounterOverflowLost])
	}
	e.log.Info("evictor stopped", args...)
}

// Evict runs one eviction cycle. Not safe for concurrent use (Run and
// Shutdown call it from one goroutine at a time).
//
// A failure after the flip (reading the ended generation's maps) does not
// discard the generation: what was read is handed on, the generation is
// kept (unread; counted in Stats.ReadFailures, logged) and the next
// eviction reads the rest of it before it flips, so the Flip that would
// empty its flow map comes only once the map has been read. The rest is
// exact: the enrichment map is emptied as it is read, so a second read
// returns only the entries not read yet (those read stay in e.pending); the
// flow map is not, so the second read skips as many entries as the first
// one handed on. Both walks see the same entries in the same order (a hash
// map's buckets in turn): no program writes an ended map (they only look it
// up) and nothing deletes from it until that Flip. While the read keeps
// failing, no eviction flips: the active map goes on filling (and then
// overflows into the ring buffer, counted) rather than losing a generation.
func (e *Evictor) Evict(reason string) error {
	start := time.Now()
	// Debug lines mark each eviction's start and end (the chaos suite
	// kills an agent between the two); checked first, so that the usual
	// levels pay nothing.
	debug := e.log.Enabled(context.Background(), slog.LevelDebug)
	if debug {
		e.log.Debug("eviction started", "reason", reason)
	}
	out := e.newOutput(reason)
	if e.kept {
		if err := e.read(out); err != nil {
			return e.keep(out, err)
		}
		e.partial(out) // its enrichment entries without a flow entry
		e.kept = false
	}
	ended, err := e.gens.Flip()
	if err != nil {
		out.flush()
		return err
	}
	e.unread, e.unreadFlows, e.swept = ended, 0, false
	clear(e.pending)
	e.enrichVals = e.enrichVals[:0]
	if err := e.read(out); err != nil {
		return e.keep(out, err)
	}
	over := e.over.take()
	// A loop here, not over.each(out.add): the method value and the
	// pointers handed through it would escape, an allocation per eviction
	// and one per flow (TestBudget's evictor_allocs_per_100k_flows).
	var v datapath.FlowValue
	for k, i := range over.idx {
		over.ents[i].load(&v)
		out.add(&k, &v)
	}
	e.Stats.OverflowFlows.Add(uint64(over.len()))
	for k, f := range e.over.takeSplit() {
		out.add(&k.key, &f.v)
		e.Stats.OverflowFlows.Add(1)
	}
	e.partial(out)
	out.flush()
	e.logLost()
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
	if e.cfg.Observer != nil {
		e.cfg.Observer.ObserveEviction(reason, out.n, d)
	}
	if debug {
		e.log.Debug("eviction done", "reason", reason, "flows", out.n, "duration", d)
	}
	return nil
}

// logLost says, at most once a minute, that packets were lost at a memory
// bound since the last line (the counts are in the lost packets metric).
func (e *Evictor) logLost() {
	if time.Since(e.lostLogAt) < time.Minute {
		return
	}
	for i, reason := range LostReasons {
		n := e.Stats.LostPackets[i].Load()
		if n == e.lostLogged[i] {
			continue
		}
		e.log.Warn("packets lost at a memory bound (flowlens_agent_lost_packets_total)", "reason", reason,
			"packets", n-e.lostLogged[i], "overflow_max_flows", e.over.max)
		e.lostLogged[i], e.lostLogAt = n, time.Now()
	}
}

// read reads what is left of the ended generation e.unread into out: its
// enrichment entries into e.pending, then its flow entries, each merged
// with its enrichment entry, skipping the e.unreadFlows handed on before.
func (e *Evictor) read(out *output) error {
	if len(e.cfg.Features) > 0 {
		_, err := e.unread.ReadEnrich(func(keys []datapath.FlowKey, vals []datapath.EnrichValue) error {
			for i := range keys {
				e.pending[keys[i]] = int32(len(e.enrichVals))
				e.enrichVals = append(e.enrichVals, vals[i])
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !e.swept {
			e.sweep()
			e.swept = true
		}
	}
	skip, n := e.unreadFlows, out.n
	_, err := e.unread.ReadFlows(func(keys []datapath.FlowKey, vals []datapath.FlowValue) error {
		if skip >= len(keys) {
			skip -= len(keys)
			return nil
		}
		keys, vals = keys[skip:], vals[skip:]
		skip = 0
		for i := range keys {
			if vals[i].Flags&(datapath.FlowFlagXlatAlias|datapath.FlowFlagXlatVia) != 0 {
				e.via.take(&keys[i], &vals[i]) // feature xlat (xlat.go)
				continue
			}
			out.add(&keys[i], &vals[i])
		}
		e.unreadFlows += len(keys)
		return nil
	})
	if err == nil {
		e.via.flush(out)
	}
	e.Stats.Flows.Add(uint64(out.n - n))
	if err == nil && e.cfg.OverlayOuter {
		err = e.readOuter(out)
	}
	return err
}

// sweep lets the features that keep kernel state across generations
// (feature.Sweeper: dns's pending queries) report what expired by the flip
// into the ended generation's enrichment entries. A failed sweep is logged:
// what it did not report stays in the kernel for the next one.
func (e *Evictor) sweep() {
	for _, f := range e.cfg.Features {
		if s, ok := f.(feature.Sweeper); ok {
			if err := s.Sweep(e.gens.Maps(), e.unread.FlippedAt(), e.entry); err != nil {
				e.log.Warn("sweeping a feature's kernel state failed: retried at the next eviction",
					"feature", f.Name(), "error", err)
			}
		}
	}
}

// entry returns the ended generation's enrichment entry of k, adding a zero
// one when k has none; valid until the next call (enrichVals may grow).
func (e *Evictor) entry(k *datapath.FlowKey) *datapath.EnrichValue {
	i, ok := e.pending[*k]
	if !ok {
		i = int32(len(e.enrichVals))
		e.pending[*k] = i
		e.enrichVals = append(e.enrichVals, datapath.EnrichValue{})
	}
	return &e.enrichVals[i]
}

// keep hands on what a failed read produced and keeps the generation for
// the next eviction.
func (e *Evictor) keep(out *output, err error) error {
	out.flush()
	e.kept = true
	e.Stats.ReadFailures.Add(1)
	e.log.Warn("reading the ended generation failed: kept for the next eviction, not discarded",
		"flows_handed_on", e.unreadFlows, "error", err)
	return fmt.Errorf("ended generation kept for the next eviction: %w", err)
}

// rate is the sampling rate of the packets of a flow under filter rule
// position rule-1 (0: the default action's).
func (e *Evictor) rate(rule uint8) uint32 {
	if int(rule) < len(e.cfg.Rates) {
		return e.cfg.Rates[rule]
	}
	return e.cfg.Sampling
}

// partial hands on the enrichment entries left without a flow entry as
// partial records.
func (e *Evictor) partial(out *output) {
	now := time.Now()
	for k, i := range e.pending {
		r := out.next()
		r.Sampling, r.Partial, r.StartTime, r.EndTime = e.cfg.Sampling, true, now, now
		fillKey(r, &k)
		e.enrich(r, &e.enrichVals[i])
		e.Stats.PartialFlows.Add(1)
		out.done()
	}
	clear(e.pending)
}

// enrich lets every running feature fill its fields from v, and copies
// the flow's tunnel (tunnel.go).
func (e *Evictor) enrich(r *flow.Record, v *datapath.EnrichValue) {
	fillTunnel(r, v)
	for _, f := range e.cfg.Features {
		f.Fill(r, v)
	}
}

// output fills batches with one eviction's records and hands them to the
// Sink as they fill up.
type output struct {
	e     *Evictor
	b     *flow.Batch
	clk   Clock
	names *nameCache
	until time.Time // the Sink's wait budget, per consumer: until minus now
	n     int       // records produced
}

func (e *Evictor) newOutput(reason string) *output {
	o := &output{e: e, clk: NewClock(e.cfg.Clock.Timebase()), names: &e.names}
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
		for _, a := range o.e.annotators {
			for i := range o.b.Records {
				a.Annotate(&o.b.Records[i])
			}
		}
		o.e.cfg.Sink.Push(o.b, o.until)
	}
	o.b = nil
}

// add converts one flow map entry and merges its enrichment entry, if any.
func (o *output) add(k *datapath.FlowKey, v *datapath.FlowValue) {
	r := o.next()
	r.Sampling = o.e.rate(v.Rule)
	fromValue(r, k, v, o.clk, o.names, o.b)
	if pending := o.e.pending; len(pending) > 0 {
		if i, ok := pending[*k]; ok {
			o.e.enrich(r, &o.e.enrichVals[i])
			delete(pending, *k)
		}
	}
	o.done()
}

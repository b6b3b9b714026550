package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/pkg/flow"
)

// QueueStats are cumulative counts per exporter, safe to read concurrently.
type QueueStats struct {
	Batches        atomic.Uint64 // batches exported
	Flows          atomic.Uint64 // flows exported
	Errors         atomic.Uint64 // failed Export calls
	ErrorFlows     atomic.Uint64 // flows in those calls (the exporter's own counts say which were lost)
	DroppedBatches atomic.Uint64 // batches dropped because the queue stayed full
	DroppedFlows   atomic.Uint64 // flows in those batches
	WaitNanos      atomic.Uint64 // time Push spent waiting for room
	// ShutdownBatches and ShutdownFlows were still queued when the
	// exporter's shutdown budget ended (Close's ctx), or pushed after it:
	// never handed to the exporter, lost. The batch an Export held then is
	// the exporter's to count (Errors, and its own failed flows).
	ShutdownBatches atomic.Uint64
	ShutdownFlows   atomic.Uint64
}

// Queue runs one Exporter behind a bounded buffer of batches.
type Queue struct {
	exp   Exporter
	log   *slog.Logger
	Stats QueueStats

	mu  sync.Mutex
	buf []*flow.Batch // FIFO of at most cap batches
	cap int
	// maxFlows, when > 0, bounds the records queued (flows) too: a batch
	// that would take them past it waits, or the oldest are dropped, as
	// for a queue of cap batches (LimitFlows). A queue always takes one
	// batch, however large.
	maxFlows, flows int
	closed          bool
	wake            chan struct{} // a batch was queued (or Close was called)
	room            chan struct{} // a batch left the queue
	done            chan struct{}
	lastLog         time.Time
	// This queue's own wait budget in the eviction being pushed, which
	// the deadline its Pushes share identifies: the time Push may still
	// wait for room here. Only waiting for this queue spends it, so an
	// eviction that waited for another exporter leaves it whole.
	evUntil time.Time
	evLeft  time.Duration
	// evProgress is progress() when this eviction's budget began.
	// stuck: a whole wait budget was spent with the queue still full and
	// not one Export finished meanwhile (still evProgress, kept in
	// stuckAt); until the exporter finishes another, the next evictions
	// get no budget here. A consumer that exports nothing (a collector
	// that never reads) then costs the evictions its budget once, not each
	// time, so they keep the pace of the flow map and the other exporters
	// get their flows; a slow one that still exports keeps its budget.
	evProgress uint64
	stuck      bool
	stuckAt    uint64
	// Once stopping (StopWaiting: the agent is shutting down), waits for
	// room are also bounded by stopLeft, a budget for all the remaining
	// evictions spent only by waiting for this queue, and end by waitEnd
	// whatever is left.
	stopping bool
	stopLeft time.Duration
	waitEnd  time.Time
}

// NewQueue returns a Queue holding at most capacity batches; Run starts it.
func NewQueue(e Exporter, capacity int, log *slog.Logger) *Queue {
	if capacity < 1 {
		capacity = 1
	}
	if log == nil {
		log = slog.Default()
	}
	return &Queue{exp: e, log: log.With("exporter", e.Name()), cap: capacity,
		wake: make(chan struct{}, 1), room: make(chan struct{}, 1), done: make(chan struct{})}
}

// LimitFlows bounds the records queued as well as the batches (n <= 0:
// no bound), and returns q; call it before Run. Full batches of a flood
// then wait in fewer of them, while the small batches of light traffic
// still fill the capacity in batches (what rides out a consumer's outage
// across evictions).
func (q *Queue) LimitFlows(n int) *Queue {
	q.maxFlows = n
	return q
}

// full reports whether b finds no room. Called with q.mu held.
func (q *Queue) full(b *flow.Batch) bool {
	return len(q.buf) == q.cap || (q.maxFlows > 0 && len(q.buf) > 0 && q.flows+b.Len() > q.maxFlows)
}

// Name is the exporter's name.
func (q *Queue) Name() string { return q.exp.Name() }

// Push queues a batch, taking over one of its references (released once the
// batch is exported or dropped). When the queue is full it waits for room,
// within this queue's own wait budget for the eviction: the Pushes of one
// eviction share until, and the budget is until minus the time of the
// eviction's first Push here, spent only by waiting for this queue. Once it
// is spent Push drops the oldest queued batch, counted, with a log line at
// most every 10s. After Close, batches are released unexported, counted as
// lost at shutdown.
func (q *Queue) Push(b *flow.Batch, until time.Time) {
	if b.Len() == 0 {
		b.Release()
		return
	}
	q.mu.Lock()
	q.budget(until)
	q.waitRoom(b)
	q.put(b)
}

// tryPush is Push without waiting: it returns false, having done nothing,
// when the queue is full and its budget left (Fanout then waits in Push).
func (q *Queue) tryPush(b *flow.Batch, until time.Time) bool {
	if b.Len() == 0 {
		b.Release()
		return true
	}
	q.mu.Lock()
	q.budget(until)
	if q.full(b) && !q.closed && q.evLeft > 0 {
		q.mu.Unlock()
		return false
	}
	q.put(b)
	return true
}

// budget starts the wait budget of a new eviction (a new until), cut to
// what is left of the shutdown's (StopWaiting). Called with q.mu held.
func (q *Queue) budget(until time.Time) {
	if !until.Equal(q.evUntil) {
		q.evUntil, q.evLeft = until, time.Until(until)
		q.evProgress = q.progress()
		if q.stuck {
			if q.progress() == q.stuckAt {
				q.evLeft = 0
			} else {
				q.stuck = false
			}
		}
	}
	q.evLeft = q.left()
}

// progress is the number of Exports that have returned.
func (q *Queue) progress() uint64 { return q.Stats.Batches.Load() + q.Stats.Errors.Load() }

// left is the time Push may still wait for room. Called with q.mu held.
func (q *Queue) left() time.Duration {
	if !q.stopping {
		return q.evLeft
	}
	return min(q.evLeft, q.stopLeft, time.Until(q.waitEnd))
}

// StopWaiting bounds the waits for room of the evictions still to come and
// of a Push already waiting: from the shutdown signal on, this queue may
// make them wait budget in all (spent only by waiting for this queue, so a
// healthy consumer's quick turns cost it little while a dead one spends it
// once), and never past end, shared by every queue, whatever is left. Then
// a full queue drops its oldest batch (counted) rather than holding up the
// final eviction and flush.
func (q *Queue) StopWaiting(budget time.Duration, end time.Time) {
	q.mu.Lock()
	q.stopping, q.stopLeft, q.waitEnd = true, budget, end
	q.mu.Unlock()
	signal(q.room) // a waiting Push recomputes its wait
}

// waitRoom waits while the queue has no room for b, is open and its budget
// left, spending the budget. Called with q.mu held; returns with it held.
func (q *Queue) waitRoom(b *flow.Batch) {
	var waited time.Duration
	for q.full(b) && !q.closed && q.evLeft > 0 {
		left := q.left()
		if left <= 0 {
			q.evLeft = 0
			break
		}
		q.mu.Unlock()
		start := time.Now()
		t := time.NewTimer(left)
		select {
		case <-q.room:
		case <-t.C:
		}
		t.Stop()
		w := time.Since(start)
		waited += w
		q.mu.Lock()
		q.evLeft -= w
		if q.stopping {
			q.stopLeft -= w
		}
	}
	if waited > 0 {
		q.Stats.WaitNanos.Add(uint64(waited))
	}
	if waited > 0 && q.evLeft <= 0 && q.full(b) && !q.closed && !q.stuck && q.progress() == q.evProgress {
		q.stuck, q.stuckAt = true, q.evProgress
	}
}

// put queues b, dropping the oldest batches while the queue has no room
// for it. Called with q.mu held; unlocks it.
func (q *Queue) put(b *flow.Batch) {
	if q.closed {
		q.mu.Unlock()
		q.lost([]*flow.Batch{b})
		return
	}
	var dropped []*flow.Batch
	for q.full(b) {
		d := q.buf[0]
		q.buf[0] = nil
		q.buf = q.buf[1:]
		q.flows -= d.Len()
		dropped = append(dropped, d)
		q.Stats.DroppedBatches.Add(1)
		q.Stats.DroppedFlows.Add(uint64(d.Len()))
	}
	if len(dropped) > 0 && time.Since(q.lastLog) > 10*time.Second {
		q.lastLog = time.Now()
		q.log.Warn("export queue full: dropping the oldest batches (consumer slow or down)",
			"dropped_batches_total", q.Stats.DroppedBatches.Load(), "dropped_flows_total", q.Stats.DroppedFlows.Load())
	}
	q.buf = append(q.buf, b)
	q.flows += b.Len()
	q.mu.Unlock()
	for _, d := range dropped {
		d.Release()
	}
	signal(q.wake)
}

// signal wakes one waiter without blocking (the channel holds one token).
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Len is the number of queued batches.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf)
}

func (q *Queue) pop() (*flow.Batch, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.buf) == 0 {
		return nil, q.closed
	}
	b := q.buf[0]
	q.buf[0] = nil
	q.buf = q.buf[1:]
	q.flows -= b.Len()
	signal(q.room)
	return b, false
}

// Run exports queued batches until Close has been called and the queue is
// drained, or ctx is cancelled. ctx also bounds each Export call.
func (q *Queue) Run(ctx context.Context) {
	defer close(q.done)
	defer q.releaseAll() // cancelled: what is left is not exported
	for {
		b, closed := q.pop()
		if closed {
			return
		}
		if b == nil {
			select {
			case <-q.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		err := q.exp.Export(ctx, b.Records)
		n := b.Len()
		b.Release()
		if err != nil {
			q.Stats.Errors.Add(1)
			q.Stats.ErrorFlows.Add(uint64(n))
			q.log.Warn("export failed", "flows", n, "error", err)
			if ctx.Err() != nil {
				return // cancelled: the rest is released, not sent to fail one by one
			}
			continue
		}
		q.Stats.Batches.Add(1)
		q.Stats.Flows.Add(uint64(n))
	}
}

// releaseAll closes the queue and releases what is queued, counted as lost
// at shutdown.
func (q *Queue) releaseAll() {
	q.mu.Lock()
	buf := q.buf
	q.buf, q.flows = nil, 0
	q.closed = true
	q.mu.Unlock()
	signal(q.room) // a Push waiting for room gives up
	q.lost(buf)
}

// lost releases batches that will never be exported, counting them and
// their flows as lost at shutdown, with one log line.
func (q *Queue) lost(bs []*flow.Batch) {
	if len(bs) == 0 {
		return
	}
	flows := 0
	for _, b := range bs {
		flows += b.Len()
		b.Release()
	}
	q.Stats.ShutdownBatches.Add(uint64(len(bs)))
	q.Stats.ShutdownFlows.Add(uint64(flows))
	q.log.Warn("exporter stopped with batches not delivered: its shutdown budget ran out (consumer slow or down)",
		"batches", len(bs), "flows", flows)
}

// Close stops accepting batches and waits until Run has exported what is
// queued, at most until ctx ends: the exporter's shutdown budget. What is
// still queued then is released, counted (Stats.ShutdownFlows) and logged.
// Then it closes the exporter, which aborts an Export in progress, and
// waits for both until ctx ends or, if it has, config.ExportCloseGrace
// more; an exporter stuck in Close or Export is left behind (the process is
// exiting). Close never waits for a stuck consumer past its budget and the
// grace.
func (q *Queue) Close(ctx context.Context) error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	signal(q.wake)
	signal(q.room) // a Push waiting for room gives up
	select {
	case <-q.done:
	case <-ctx.Done():
		q.releaseAll() // Run is in an Export: it finds the queue empty next
	}
	closed := make(chan error, 1)
	go func() { closed <- q.exp.Close() }()
	// Wait for the exporter's Close, and for Run, whose Export in progress
	// Close aborts: until ctx ends, then config.ExportCloseGrace more.
	var (
		err      error
		waitExp  = (<-chan error)(closed)
		waitRun  = (<-chan struct{})(q.done)
		deadline = ctx.Done()
		grace    <-chan time.Time
	)
	if ctx.Err() != nil {
		deadline, grace = nil, time.After(config.ExportCloseGrace)
	}
	for waitExp != nil || waitRun != nil {
		select {
		case err = <-waitExp:
			waitExp = nil
		case <-waitRun:
			waitRun = nil
		case <-deadline:
			deadline, grace = nil, time.After(config.ExportCloseGrace)
		case <-grace:
			return errors.Join(err, fmt.Errorf("exporter %s still busy %v after its shutdown budget ran out: left behind",
				q.Name(), config.ExportCloseGrace))
		}
	}
	return err
}

// Summary logs what became of the flows this exporter was given, once at
// shutdown: exported, dropped for backpressure, lost at shutdown, in
// failed exports (batches and flows; they add up to every flow given),
// and the failed flows (FailedFlows); for an exporter that learns them,
// the flows its consumer acknowledged and those it rejected (lost too:
// without them the line would not name every flow lost).
func (q *Queue) Summary() {
	st := &q.Stats
	args := []any{"exported_flows", st.Flows.Load(), "dropped_flows", st.DroppedFlows.Load(),
		"shutdown_lost_flows", st.ShutdownFlows.Load(), "failed_exports", st.Errors.Load(), "failed_export_flows", st.ErrorFlows.Load(),
		"failed_flows", q.FailedFlows()}
	if e, ok := q.exp.(Delivering); ok {
		d, keeps := e.Delivery()
		if keeps&CountAcked != 0 {
			args = append(args, "acked_flows", d.AckedFlows.Load())
		}
		if keeps&CountRejected != 0 {
			args = append(args, "rejected_flows", d.RejectedFlows.Load())
		}
	}
	q.log.Info("exporter stopped", args...)
}

// FailedFlows are the flows handed to the exporter and not delivered
// (export_failed_flows_total): its own count when it keeps one
// (CountFailed: it knows which flows of a failed Export were lost, and
// those it gave up on later), else every flow of its failed Exports
// (Stats.ErrorFlows), so that every exporter counts its failures per flow.
func (q *Queue) FailedFlows() uint64 {
	if e, ok := q.exp.(Delivering); ok {
		if d, keeps := e.Delivery(); keeps&CountFailed != 0 {
			return d.FailedFlows.Load()
		}
	}
	return q.Stats.ErrorFlows.Load()
}

// StopWaiting calls StopWaiting on every queue: each its own budget, one
// end for all.
func (f Fanout) StopWaiting(budget time.Duration, end time.Time) {
	for _, q := range f {
		q.StopWaiting(budget, end)
	}
}

// Close closes every queue at once (Queue.Close), each with its own budget
// from now, so that a dead consumer spends its own budget only and the
// others flush meanwhile; then each says what became of its flows
// (Summary). It returns once every queue is closed or left behind: within
// budget plus config.ExportCloseGrace.
func (f Fanout) Close(budget time.Duration) error {
	errs := make([]error, len(f))
	var wg sync.WaitGroup
	for i, q := range f {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			if err := q.Close(ctx); err != nil {
				errs[i] = fmt.Errorf("close exporter %s: %w", q.Name(), err)
			}
			q.Summary()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Fanout is the export queues as one evictor.Sink: every queue gets each
// batch (one reference each). Each queue has its own wait budget per
// eviction (see Queue.Push), and the queues that must wait for room wait at
// the same time, so a consumer that is down spends its own budget only: it
// never makes a healthy exporter drop, and an eviction waits at most its
// deadline's budget per exporter.
type Fanout []*Queue

// Push hands b to every queue and returns once each has taken it (queued,
// or dropped an older batch for it); with no queue it releases b. It waits
// only while a queue is full with budget left.
func (f Fanout) Push(b *flow.Batch, until time.Time) {
	switch len(f) {
	case 0:
		b.Release()
		return
	case 1:
		f[0].Push(b, until)
		return
	}
	b.Retain(len(f) - 1)
	// Offer the batch to every queue first, so each starts its budget at
	// the same time; only those that are full wait, concurrently (the last
	// one in this goroutine). No goroutine, no allocation in the common case.
	var wg *sync.WaitGroup
	var last *Queue
	for _, q := range f {
		if q.tryPush(b, until) {
			continue
		}
		if last != nil {
			if wg == nil {
				wg = new(sync.WaitGroup)
			}
			wg.Add(1)
			go func(q *Queue, wg *sync.WaitGroup) { defer wg.Done(); q.Push(b, until) }(last, wg)
		}
		last = q
	}
	if last != nil {
		last.Push(b, until)
	}
	if wg != nil {
		wg.Wait()
	}
}

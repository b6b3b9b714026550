package exporter

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowlens/flowlens/pkg/flow"
)

// QueueStats are cumulative counts per exporter, safe to read concurrently.
type QueueStats struct {
	Batches        atomic.Uint64 // batches exported
	Flows          atomic.Uint64 // flows exported
	Errors         atomic.Uint64 // failed Export calls
	DroppedBatches atomic.Uint64 // batches dropped because the queue stayed full
	DroppedFlows   atomic.Uint64 // flows in those batches
	WaitNanos      atomic.Uint64 // time Push spent waiting for room
}

// Queue runs one Exporter behind a bounded buffer of batches.
type Queue struct {
	exp   Exporter
	log   *slog.Logger
	Stats QueueStats

	mu      sync.Mutex
	buf     []*flow.Batch // FIFO of at most cap batches
	cap     int
	closed  bool
	wake    chan struct{} // a batch was queued (or Close was called)
	room    chan struct{} // a batch left the queue
	done    chan struct{}
	lastLog time.Time
	// This queue's own wait budget in the eviction being pushed, which
	// the deadline its Pushes share identifies: the time Push may still
	// wait for room here. Only waiting for this queue spends it, so an
	// eviction that waited for another exporter leaves it whole.
	evUntil time.Time
	evLeft  time.Duration
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

// Name is the exporter's name.
func (q *Queue) Name() string { return q.exp.Name() }

// Push queues a batch, taking over one of its references (released once the
// batch is exported or dropped). When the queue is full it waits for room,
// within this queue's own wait budget for the eviction: the Pushes of one
// eviction share until, and the budget is until minus the time of the
// eviction's first Push here, spent only by waiting for this queue. Once it
// is spent Push drops the oldest queued batch, counted, with a log line at
// most every 10s. After Close, batches are released unexported.
func (q *Queue) Push(b *flow.Batch, until time.Time) {
	if b.Len() == 0 {
		b.Release()
		return
	}
	q.mu.Lock()
	q.budget(until)
	q.waitRoom()
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
	if len(q.buf) == q.cap && !q.closed && q.evLeft > 0 {
		q.mu.Unlock()
		return false
	}
	q.put(b)
	return true
}

// budget starts the wait budget of a new eviction (a new until). Called with
// q.mu held.
func (q *Queue) budget(until time.Time) {
	if !until.Equal(q.evUntil) {
		q.evUntil, q.evLeft = until, time.Until(until)
	}
}

// waitRoom waits while the queue is full, open and its budget left, spending
// the budget. Called with q.mu held; returns with it held.
func (q *Queue) waitRoom() {
	var waited time.Duration
	for len(q.buf) == q.cap && !q.closed && q.evLeft > 0 {
		left := q.evLeft
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
	}
	if waited > 0 {
		q.Stats.WaitNanos.Add(uint64(waited))
	}
}

// put queues b, dropping the oldest batch if the queue is full. Called with
// q.mu held; unlocks it.
func (q *Queue) put(b *flow.Batch) {
	if q.closed {
		q.mu.Unlock()
		b.Release()
		return
	}
	var dropped *flow.Batch
	if len(q.buf) == q.cap {
		dropped = q.buf[0]
		q.buf[0] = nil
		q.buf = q.buf[1:]
		q.Stats.DroppedBatches.Add(1)
		q.Stats.DroppedFlows.Add(uint64(dropped.Len()))
		if time.Since(q.lastLog) > 10*time.Second {
			q.lastLog = time.Now()
			q.log.Warn("export queue full: dropping the oldest batches (consumer slow or down)",
				"dropped_batches_total", q.Stats.DroppedBatches.Load(), "dropped_flows_total", q.Stats.DroppedFlows.Load())
		}
	}
	q.buf = append(q.buf, b)
	q.mu.Unlock()
	if dropped != nil {
		dropped.Release()
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

func (q *Queue) releaseAll() {
	q.mu.Lock()
	buf := q.buf
	q.buf = nil
	q.closed = true
	q.mu.Unlock()
	signal(q.room) // a Push waiting for room gives up
	for _, b := range buf {
		b.Release()
	}
}

// Close stops accepting batches, waits until Run has exported what is queued
// (or until ctx ends), then closes the exporter.
func (q *Queue) Close(ctx context.Context) error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	signal(q.wake)
	signal(q.room) // a Push waiting for room gives up
	select {
	case <-q.done:
	case <-ctx.Done():
	}
	return q.exp.Close()
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

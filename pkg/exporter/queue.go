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
	DroppedBatches atomic.Uint64 // batches dropped because the queue was full
	DroppedFlows   atomic.Uint64 // flows in those batches
}

// Queue runs one Exporter behind a bounded buffer of batches.
type Queue struct {
	exp   Exporter
	log   *slog.Logger
	Stats QueueStats

	mu      sync.Mutex
	buf     [][]flow.Record // ring of at most cap batches
	cap     int
	closed  bool
	wake    chan struct{}
	done    chan struct{}
	lastLog time.Time
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
		wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Name is the exporter's name.
func (q *Queue) Name() string { return q.exp.Name() }

// Push queues a batch without ever blocking. When the queue is full the
// oldest batch is dropped and counted, with a log line at most every 10s.
func (q *Queue) Push(batch []flow.Record) {
	if len(batch) == 0 {
		return
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	if len(q.buf) == q.cap {
		old := q.buf[0]
		q.buf[0] = nil
		q.buf = q.buf[1:]
		q.Stats.DroppedBatches.Add(1)
		q.Stats.DroppedFlows.Add(uint64(len(old)))
		if time.Since(q.lastLog) > 10*time.Second {
			q.lastLog = time.Now()
			q.log.Warn("export queue full: dropping the oldest batches (consumer slow or down)",
				"dropped_batches_total", q.Stats.DroppedBatches.Load(), "dropped_flows_total", q.Stats.DroppedFlows.Load())
		}
	}
	q.buf = append(q.buf, batch)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Len is the number of queued batches.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf)
}

func (q *Queue) pop() ([]flow.Record, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.buf) == 0 {
		return nil, q.closed
	}
	b := q.buf[0]
	q.buf[0] = nil
	q.buf = q.buf[1:]
	return b, false
}

// Run exports queued batches until Close has been called and the queue is
// drained, or ctx is cancelled. ctx also bounds each Export call.
func (q *Queue) Run(ctx context.Context) {
	defer close(q.done)
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
		if err := q.exp.Export(ctx, b); err != nil {
			q.Stats.Errors.Add(1)
			q.log.Warn("export failed", "flows", len(b), "error", err)
			continue
		}
		q.Stats.Batches.Add(1)
		q.Stats.Flows.Add(uint64(len(b)))
	}
}

// Close stops accepting batches, waits until Run has exported what is queued
// (or until ctx ends), then closes the exporter.
func (q *Queue) Close(ctx context.Context) error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	select {
	case <-q.done:
	case <-ctx.Done():
	}
	return q.exp.Close()
}

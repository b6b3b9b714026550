package exporter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/pkg/flow"
)

// blocking is an exporter that waits for release before each batch.
type blocking struct {
	release chan struct{}
	mu      sync.Mutex
	got     []int // batch sizes received
	fail    bool
	closed  bool
}

func (b *blocking) Name() string { return "test" }
func (b *blocking) Export(ctx context.Context, batch []flow.Record) error {
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail {
		return errors.New("consumer down")
	}
	b.got = append(b.got, len(batch))
	return nil
}
func (b *blocking) Close() error { b.closed = true; return nil }

func batch(n int) []flow.Record { return make([]flow.Record, n) }

// A slow consumer: Push never blocks, the oldest batches are dropped and
// counted, and what is kept is exported in order.
func TestQueueDropsOldest(t *testing.T) {
	exp := &blocking{release: make(chan struct{})}
	q := exporter.NewQueue(exp, 3, nil)
	ctx := context.Background()
	go q.Run(ctx)
	q.Push(flow.BatchOf(batch(1)), time.Time{}) // taken by Run at once, blocked in Export
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		for n := 2; n <= 7; n++ {
			q.Push(flow.BatchOf(batch(n)), time.Time{}) // queue holds 3: 2,3,4 then drops 2,3,4 for 5,6,7
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Push blocked on a slow exporter")
	}
	if got := q.Stats.DroppedBatches.Load(); got != 3 {
		t.Fatalf("dropped %d batches, want 3", got)
	}
	if got := q.Stats.DroppedFlows.Load(); got != 2+3+4 {
		t.Fatalf("dropped %d flows, want 9", got)
	}
	close(exp.release) // let everything through
	closeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := q.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 5, 6, 7}; len(exp.got) != len(want) || exp.got[1] != 5 || exp.got[3] != 7 {
		t.Fatalf("exported %v, want %v", exp.got, want)
	}
	if q.Stats.Batches.Load() != 4 || q.Stats.Flows.Load() != 19 || !exp.closed {
		t.Fatalf("stats batches=%d flows=%d closed=%v", q.Stats.Batches.Load(), q.Stats.Flows.Load(), exp.closed)
	}
}

func TestQueueCountsErrors(t *testing.T) {
	exp := &blocking{release: make(chan struct{}), fail: true}
	close(exp.release)
	q := exporter.NewQueue(exp, 10, nil)
	go q.Run(context.Background())
	q.Push(flow.BatchOf(batch(2)), time.Time{})
	q.Push(flow.BatchOf(batch(3)), time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if q.Stats.Errors.Load() != 2 || q.Stats.Batches.Load() != 0 {
		t.Fatalf("errors=%d batches=%d", q.Stats.Errors.Load(), q.Stats.Batches.Load())
	}
}

// A full queue makes Push wait for room until its deadline: a consumer that
// is slower than the producer but keeps up within the deadline loses nothing.
func TestQueuePushWaitsForRoom(t *testing.T) {
	exp := &blocking{release: make(chan struct{})}
	q := exporter.NewQueue(exp, 2, nil)
	go q.Run(context.Background())
	until := time.Now().Add(10 * time.Second)
	go func() { // the consumer takes a batch every 20 ms
		for i := 0; i < 6; i++ {
			time.Sleep(20 * time.Millisecond)
			exp.release <- struct{}{}
		}
	}()
	for n := 1; n <= 6; n++ {
		q.Push(flow.BatchOf(batch(n)), until) // 1 in Export, 2 queued: the rest wait
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := q.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if d := q.Stats.DroppedBatches.Load(); d != 0 {
		t.Fatalf("dropped %d batches, want 0", d)
	}
	if q.Stats.Flows.Load() != 1+2+3+4+5+6 || len(exp.got) != 6 {
		t.Fatalf("exported %v (%d flows), want 6 batches, 21 flows", exp.got, q.Stats.Flows.Load())
	}
	if q.Stats.WaitNanos.Load() == 0 {
		t.Fatal("Push never waited although the queue was full")
	}
}

// Past the deadline Push drops the oldest queued batch at once, releasing it
// (its records go back to the pool): a stuck consumer cannot hold up the
// evictor, and every batch is either exported or counted as dropped.
func TestQueueDropsAfterDeadlineAndReleases(t *testing.T) {
	exp := &blocking{release: make(chan struct{})}
	q := exporter.NewQueue(exp, 2, nil)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	pool := flow.NewPool(4)
	fill := func(n int) *flow.Batch {
		b := pool.Get()
		b.Records = b.Records[:n]
		return b
	}
	until := time.Now().Add(100 * time.Millisecond)
	start := time.Now()
	for n := 1; n <= 4; n++ { // 1 in Export, 2 and 3 queued, 4: waits 100 ms, drops 2
		q.Push(fill(n), until)
	}
	if waited := time.Since(start); waited < 90*time.Millisecond {
		t.Fatalf("Push returned after %v, before its deadline", waited)
	}
	q.Push(fill(4), until) // past the deadline: drops 3 at once
	if d, f := q.Stats.DroppedBatches.Load(), q.Stats.DroppedFlows.Load(); d != 2 || f != 2+3 {
		t.Fatalf("dropped %d batches / %d flows, want 2 / 5", d, f)
	}
	// Batch 2 went back to the pool when dropped (the fifth fill reused it),
	// batch 3 too: the next Get reuses it.
	before := pool.Allocated.Load()
	if before != 4 {
		t.Fatalf("pool allocated %d batches for 5 pushes, want 4 (batch 2 reused)", before)
	}
	pool.Get()
	if got := pool.Allocated.Load(); got != before {
		t.Fatalf("pool allocated %d new batches, want 0 (dropped batches not released)", got-before)
	}
	// Cancelling Run releases what is still queued (and the one in Export).
	stop()
	<-done
	if q.Len() != 0 {
		t.Fatalf("%d batches still queued after Run returned", q.Len())
	}
	pool.Get()
	pool.Get()
	pool.Get()
	if got := pool.Allocated.Load(); got != before {
		t.Fatalf("pool allocated %d new batches after Run released everything, want 0", got-before)
	}
}

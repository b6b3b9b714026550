package exporter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/flowlens/flowlens/pkg/exporter"
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
	q.Push(batch(1)) // taken by Run at once, blocked in Export
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		for n := 2; n <= 7; n++ {
			q.Push(batch(n)) // queue holds 3: 2,3,4 then drops 2,3,4 for 5,6,7
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
	q.Push(batch(2))
	q.Push(batch(3))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if q.Stats.Errors.Load() != 2 || q.Stats.Batches.Load() != 0 {
		t.Fatalf("errors=%d batches=%d", q.Stats.Errors.Load(), q.Stats.Batches.Load())
	}
}

package exporter_test

import (
	"context"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/pkg/flow"
)

// A queue bounded in records as well as in batches (LimitFlows, the
// default --export-buffer's flood bound): a batch that would take the
// records past the bound drops the oldest batches until it fits (or the
// queue is empty: one batch is always taken), and every dropped batch and
// flow is counted, exactly; small batches still fill the capacity in
// batches. What is kept is exported.
func TestQueueLimitFlows(t *testing.T) {
	exp := &blocking{release: make(chan struct{})}
	q := exporter.NewQueue(exp, 8, nil).LimitFlows(2000)
	ctx := context.Background()
	go q.Run(ctx)
	q.Push(flow.BatchOf(batch(1)), time.Time{}) // taken by Run, blocked in Export
	for deadline := time.Now().Add(10 * time.Second); q.Len() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Run did not take the first batch")
		}
	}
	for _, n := range []int{1000, 1000, 500, 700, 3000} {
		// [1000] [1000 1000] [1000 500] [500 700] [3000]: 1000, 1000, 500
		// and 700 dropped
		q.Push(flow.BatchOf(batch(n)), time.Time{})
	}
	if b, f := q.Stats.DroppedBatches.Load(), q.Stats.DroppedFlows.Load(); b != 4 || f != 3200 || q.Len() != 1 {
		t.Fatalf("dropped %d batches, %d flows, %d queued; want 4, 3200 and 1 (the batch of 3000)", b, f, q.Len())
	}
	for range 9 { // the 3000 dropped for the first; 8 batches of 100, then the oldest dropped
		q.Push(flow.BatchOf(batch(100)), time.Time{})
	}
	if b, f := q.Stats.DroppedBatches.Load(), q.Stats.DroppedFlows.Load(); b != 6 || f != 6300 || q.Len() != 8 {
		t.Fatalf("dropped %d batches, %d flows, %d queued; want 6, 6300 and 8", b, f, q.Len())
	}
	close(exp.release)
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := q.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if q.Stats.Batches.Load() != 9 || q.Stats.Flows.Load() != 801 {
		t.Fatalf("exported %d batches, %d flows; want 9 and 801", q.Stats.Batches.Load(), q.Stats.Flows.Load())
	}
	if sent := 1 + 1000 + 1000 + 500 + 700 + 3000 + 9*100; q.Stats.Flows.Load()+q.Stats.DroppedFlows.Load() != uint64(sent) {
		t.Fatalf("exported %d + dropped %d, want the %d pushed", q.Stats.Flows.Load(), q.Stats.DroppedFlows.Load(), sent)
	}
}

// A consumer that spent a whole wait budget without exporting costs the
// next evictions no wait until it exports again (Queue.budget): eviction 1
// waits its budget and drops, eviction 2 drops at once, and once the
// consumer has exported a batch eviction 3 waits its budget again. Every
// drop is counted.
func TestQueueStuckConsumerWaitsOnce(t *testing.T) {
	const budget = 200 * time.Millisecond
	exp := &blocking{release: make(chan struct{})}
	q := exporter.NewQueue(exp, 1, nil)
	go q.Run(context.Background())
	waited := func() time.Duration { return time.Duration(q.Stats.WaitNanos.Load()) }
	until := time.Now().Add(budget)
	q.Push(flow.BatchOf(batch(1)), until) // taken by Run, blocked in Export
	for deadline := time.Now().Add(10 * time.Second); q.Len() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Run did not take the first batch")
		}
	}
	q.Push(flow.BatchOf(batch(2)), until) // queued
	q.Push(flow.BatchOf(batch(3)), until) // waits the budget, drops 2
	if w := waited(); w < budget*9/10 || q.Stats.DroppedFlows.Load() != 2 {
		t.Fatalf("eviction 1: waited %v, dropped %d flows; want about %v and 2", w, q.Stats.DroppedFlows.Load(), budget)
	}
	w1 := waited()
	q.Push(flow.BatchOf(batch(4)), time.Now().Add(10*time.Second)) // eviction 2: drops 3 at once
	if w := waited(); w != w1 || q.Stats.DroppedFlows.Load() != 5 {
		t.Fatalf("eviction 2: waited %v more, dropped %d flows in all; want 0 and 5", w-w1, q.Stats.DroppedFlows.Load())
	}
	exp.release <- struct{}{} // batch 1 exported; Run takes 4 and blocks
	for deadline := time.Now().Add(10 * time.Second); q.Stats.Batches.Load() != 1 || q.Len() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the consumer did not export batch 1")
		}
	}
	until = time.Now().Add(budget)
	q.Push(flow.BatchOf(batch(5)), until) // queued
	q.Push(flow.BatchOf(batch(6)), until) // waits the budget again, drops 5
	if w := waited() - w1; w < budget*9/10 || q.Stats.DroppedFlows.Load() != 10 {
		t.Fatalf("eviction 3: waited %v, dropped %d flows in all; want about %v and 10", w, q.Stats.DroppedFlows.Load(), budget)
	}
	close(exp.release)
	closeAccounted(t, q, 1+2+3+4+5+6)
}

// TestQueueSlowConsumerKeepsBudget: a consumer that finished an Export
// during an eviction's budget is slow, not stuck: though the budget ran
// out with the queue full, the next eviction waits its budget again
// (acknowledgements slower than a period, TestGRPCCycledFlowsAccounted).
func TestQueueSlowConsumerKeepsBudget(t *testing.T) {
	const budget = 200 * time.Millisecond
	exp := &blocking{release: make(chan struct{})}
	q := exporter.NewQueue(exp, 1, nil)
	go q.Run(context.Background())
	waited := func() time.Duration { return time.Duration(q.Stats.WaitNanos.Load()) }
	taken := func(batches uint64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); q.Stats.Batches.Load() != batches || q.Len() != 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the consumer did not take its batch after %d exports", batches)
			}
		}
	}
	until := time.Now().Add(budget)
	q.Push(flow.BatchOf(batch(1)), until) // taken by Run, blocked in Export
	taken(0)
	q.Push(flow.BatchOf(batch(2)), until) // queued
	exp.release <- struct{}{}             // batch 1 exported; Run takes 2 and blocks
	taken(1)
	q.Push(flow.BatchOf(batch(3)), until) // queued
	q.Push(flow.BatchOf(batch(4)), until) // waits the rest of the budget, drops 3
	if q.Stats.DroppedFlows.Load() != 3 {
		t.Fatalf("eviction 1: dropped %d flows, want 3", q.Stats.DroppedFlows.Load())
	}
	w1 := waited()
	q.Push(flow.BatchOf(batch(5)), time.Now().Add(budget)) // eviction 2: waits again, drops 4
	if w := waited() - w1; w < budget*9/10 || q.Stats.DroppedFlows.Load() != 7 {
		t.Fatalf("eviction 2: waited %v, dropped %d flows in all; want about %v and 7", w, q.Stats.DroppedFlows.Load(), budget)
	}
	close(exp.release)
	closeAccounted(t, q, 1+2+3+4+5)
}

// closeAccounted closes q (its exporter released) and fails unless its
// exported and dropped flows add up to the pushed ones.
func closeAccounted(t *testing.T, q *exporter.Queue, pushed uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := q.Stats.Flows.Load() + q.Stats.DroppedFlows.Load(); got != pushed {
		t.Fatalf("exported %d + dropped %d, want the %d pushed", q.Stats.Flows.Load(), q.Stats.DroppedFlows.Load(), pushed)
	}
}

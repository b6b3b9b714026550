package exporter_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/agent/exporter/stdout"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Shutdown with a dead exporter beside a healthy one: Fanout.Close flushes
// both at once, each within its own budget. The healthy consumer receives
// every flow (its flush is not queued behind the dead one's budget); the
// dead one's batches are each accounted for exactly: the one its Export
// held (a failed export), those dropped for backpressure before, and those
// still queued when its budget ran out (counted lost at shutdown).
func TestFanoutCloseFlushesInParallel(t *testing.T) {
	const (
		batches = 20
		budget  = 300 * time.Millisecond
	)
	dead := &neverReads{entered: make(chan struct{}, 1), closed: make(chan struct{})}
	sink := &slowLines{delay: 5 * time.Millisecond}
	deadQ := exporter.NewQueue(dead, 4, nil)
	healthyQ := exporter.NewQueue(stdout.New(sink), batches, nil) // room for everything
	fan := exporter.Fanout{deadQ, healthyQ}                       // the dead one first
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, q := range fan {
		go q.Run(ctx)
	}
	pool := flow.NewPool(8)
	src := netip.MustParseAddr("10.0.0.1")
	total, sizes := 0, []int{}
	for i := 0; i < batches; i++ {
		b := pool.Get()
		n := i%5 + 1
		for j := 0; j < n; j++ {
			r := b.Next()
			r.SrcAddr, r.DstAddr, r.SrcPort, r.DstPort, r.Proto, r.Packets = src, src, uint16(i), uint16(j), 17, 1
		}
		total += n
		sizes = append(sizes, n)
		fan.Push(b, time.Now()) // no wait budget: the dead queue drops its oldest at once
		if i == 0 {
			<-dead.entered // the first batch is in the stuck Export: the counts below are exact
		}
	}

	start := time.Now()
	if err := fan.Close(budget); err != nil {
		t.Fatalf("Close: %v", err)
	}
	elapsed := time.Since(start)
	if got := sink.lines.Load(); got != uint64(total) {
		t.Errorf("healthy consumer received %d flows, want %d", got, total)
	}
	if elapsed < budget || elapsed > budget+config.ExportCloseGrace {
		t.Errorf("Close took %v, want the dead exporter's budget %v (at most %v more)", elapsed, budget, config.ExportCloseGrace)
	}
	ds := &deadQ.Stats
	// Held by Export: batch 0; queued at the end: the last 4; dropped: the rest.
	wantShutdown := 0
	for _, n := range sizes[batches-4:] {
		wantShutdown += n
	}
	wantDropped := total - sizes[0] - wantShutdown
	if b, f := ds.ShutdownBatches.Load(), ds.ShutdownFlows.Load(); b != 4 || f != uint64(wantShutdown) {
		t.Errorf("dead exporter: %d batches / %d flows lost at shutdown, want 4 / %d", b, f, wantShutdown)
	}
	if b, f := ds.DroppedBatches.Load(), ds.DroppedFlows.Load(); b != batches-5 || f != uint64(wantDropped) {
		t.Errorf("dead exporter: %d batches / %d flows dropped for backpressure, want %d / %d", b, f, batches-5, wantDropped)
	}
	if e, f := ds.Errors.Load(), ds.ErrorFlows.Load(); e != 1 || f != uint64(sizes[0]) {
		t.Errorf("dead exporter: %d failed exports of %d flows, want 1 of %d (the batch it held: aborted by Close, before Close returns)", e, f, sizes[0])
	}
	if hs := &healthyQ.Stats; hs.ShutdownFlows.Load() != 0 || hs.DroppedFlows.Load() != 0 {
		t.Errorf("healthy exporter lost %d flows at shutdown, dropped %d", hs.ShutdownFlows.Load(), hs.DroppedFlows.Load())
	}
	// Every batch went back to the pool: taking as many as were ever made
	// makes none.
	a := pool.Allocated.Load()
	for range a {
		pool.Get()
	}
	if n := pool.Allocated.Load(); n != a {
		t.Errorf("%d of %d batches not released", n-a, a)
	}
}

// neverReads is an exporter whose consumer accepts and never reads: Export
// blocks until its context ends or Close aborts it (as the real exporters
// do, exporter.Bind).
type neverReads struct {
	entered chan struct{}
	closed  chan struct{}
	once    sync.Once
}

func (d *neverReads) Name() string { return "dead" }
func (d *neverReads) Export(ctx context.Context, _ []flow.Record) error {
	select {
	case d.entered <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-d.closed:
		return errors.New("closed")
	}
}
func (d *neverReads) Close() error { d.once.Do(func() { close(d.closed) }); return nil }

// hung is an exporter that ignores both its context and Close: Export and
// Close never return.
type hung struct{ entered chan struct{} }

func (h *hung) Name() string { return "hung" }
func (h *hung) Export(context.Context, []flow.Record) error {
	h.entered <- struct{}{}
	select {}
}
func (h *hung) Close() error { select {} }

// An exporter that hangs even in Close is left behind after its budget and
// the close grace: Close returns, says so, and what was queued is counted.
func TestQueueCloseLeavesHungExporterBehind(t *testing.T) {
	h := &hung{entered: make(chan struct{}, 1)}
	q := exporter.NewQueue(h, 4, nil)
	go q.Run(context.Background())
	q.Push(flow.BatchOf(batch(3)), time.Time{})
	<-h.entered
	q.Push(flow.BatchOf(batch(5)), time.Time{})
	q.Push(flow.BatchOf(batch(7)), time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := q.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "left behind") {
		t.Fatalf("Close of a hung exporter: %v, want it left behind", err)
	}
	if b, f := q.Stats.ShutdownBatches.Load(), q.Stats.ShutdownFlows.Load(); b != 2 || f != 12 {
		t.Errorf("%d batches / %d flows counted lost at shutdown, want 2 / 12", b, f)
	}
	// A batch pushed after Close is lost too, and counted.
	q.Push(flow.BatchOf(batch(2)), time.Time{})
	if f := q.Stats.ShutdownFlows.Load(); f != 14 {
		t.Errorf("%d flows counted lost at shutdown after a late Push, want 14", f)
	}
}

// StopWaiting ends a Push that waits for room with budget left: the
// shutdown's last evictions cannot wait past it, whatever their budget.
func TestQueueStopWaitingEndsWait(t *testing.T) {
	dead := &stuck{entered: make(chan struct{}, 1)}
	q := exporter.NewQueue(dead, 1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	q.Push(flow.BatchOf(batch(1)), time.Time{})
	<-dead.entered
	q.Push(flow.BatchOf(batch(2)), time.Time{}) // the queue is full
	until := time.Now().Add(time.Hour)
	pushed := make(chan struct{})
	go func() { q.Push(flow.BatchOf(batch(3)), until); close(pushed) }()
	time.Sleep(50 * time.Millisecond) // the Push above waits for room
	select {
	case <-pushed:
		t.Fatal("Push did not wait for room with an hour of budget")
	default:
	}
	q.StopWaiting(time.Hour, time.Now())
	select {
	case <-pushed:
	case <-time.After(10 * time.Second):
		t.Fatal("Push still waiting after StopWaiting")
	}
	if b, f := q.Stats.DroppedBatches.Load(), q.Stats.DroppedFlows.Load(); b != 1 || f != 2 {
		t.Errorf("dropped %d batches / %d flows, want the oldest queued: 1 / 2", b, f)
	}
	// Later evictions' Pushes do not wait either.
	q.Push(flow.BatchOf(batch(4)), time.Now().Add(time.Hour))
	if b := q.Stats.DroppedBatches.Load(); b != 2 {
		t.Errorf("dropped %d batches, want 2", b)
	}
}

// From the shutdown signal on, each queue has its own budget for making the
// last evictions wait, spent only by waiting for it: a dead consumer spends
// its budget once and then drops its oldest batches, counted, while a
// healthy but slower one beside it, whose real work fits in its own budget,
// keeps making the eviction wait for that work and loses nothing, though
// its waits and the dead one's add up past one budget.
func TestStopWaitingBudgetIsPerQueue(t *testing.T) {
	const (
		batches = 30
		budget  = 500 * time.Millisecond // the healthy work: 30 writes of 10 ms
	)
	dead := &neverReads{entered: make(chan struct{}, 1), closed: make(chan struct{})}
	sink := &slowLines{delay: 10 * time.Millisecond}
	deadQ := exporter.NewQueue(dead, 2, nil)
	healthyQ := exporter.NewQueue(stdout.New(sink), 2, nil)
	fan := exporter.Fanout{deadQ, healthyQ}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, q := range fan {
		go q.Run(ctx)
	}
	fan.StopWaiting(budget, time.Now().Add(time.Hour))
	until := time.Now().Add(time.Hour) // the eviction's own budget: no bound here
	for i := 0; i < batches; i++ {
		fan.Push(flow.BatchOf(batch(1)), until)
		if i == 0 {
			<-dead.entered
		}
	}
	if err := fan.Close(time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := sink.lines.Load(); got != batches {
		t.Errorf("healthy consumer received %d flows, want %d", got, batches)
	}
	hs, ds := &healthyQ.Stats, &deadQ.Stats
	if hs.DroppedFlows.Load() != 0 {
		t.Errorf("healthy exporter dropped %d flows", hs.DroppedFlows.Load())
	}
	if hs.WaitNanos.Load() == 0 {
		t.Error("the healthy queue never made the eviction wait: no load, the test proves nothing")
	}
	// Dead: batch 0 in its Export, 2 queued at the end, the rest dropped.
	if d := ds.DroppedBatches.Load(); d != batches-3 {
		t.Errorf("dead exporter dropped %d batches, want %d", d, batches-3)
	}
	if w := time.Duration(ds.WaitNanos.Load()); w < budget || w > budget+time.Second {
		t.Errorf("the dead queue made the eviction wait %v, want its budget %v once", w, budget)
	}
}

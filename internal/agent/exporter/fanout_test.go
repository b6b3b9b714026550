package exporter_test

import (
	"bytes"
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/agent/exporter/stdout"
	"github.com/flowlens/flowlens/pkg/flow"
)

// stuck is an exporter whose consumer is down: Export never returns until
// its context ends (the agent's Run context at shutdown).
type stuck struct{ entered chan struct{} }

func (s *stuck) Name() string { return "stuck" }
func (s *stuck) Export(ctx context.Context, _ []flow.Record) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}
func (s *stuck) Close() error { return nil }

// slowLines is the healthy consumer's end: a slow pipe that counts the JSON
// lines the stdout exporter writes.
type slowLines struct {
	lines atomic.Uint64
	delay time.Duration
}

func (w *slowLines) Write(p []byte) (int, error) {
	time.Sleep(w.delay)
	w.lines.Add(uint64(bytes.Count(p, []byte{'\n'})))
	return len(p), nil
}

// A stuck exporter beside a healthy one, under load: the evictor pushes
// batches far faster than the healthy consumer takes them, through queues of
// two batches, with a short wait budget per eviction. The stuck exporter
// uses up its own budget once (the next evictions do not wait for it: it
// exported nothing since) and then loses its oldest batches, counted
// exactly; the healthy one, whose budget the stuck one cannot touch, gets
// every flow and drops nothing. Memory stays bounded by the queues.
func TestFanoutStuckExporterDoesNotStarveHealthyOne(t *testing.T) {
	const (
		capacity  = 2
		evictions = 3
		perEvict  = 100         // batches per eviction
		budget    = time.Second // per eviction (evictor.Config.ExportWait)
	)
	dead := &stuck{entered: make(chan struct{}, 1)}
	sink := &slowLines{delay: 100 * time.Microsecond}
	deadQ := exporter.NewQueue(dead, capacity, nil)
	healthyQ := exporter.NewQueue(stdout.New(sink), capacity, nil)
	fan := exporter.Fanout{deadQ, healthyQ} // the dead one first: the order of --export=grpc,stdout

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, q := range fan {
		wg.Add(1)
		go func() { defer wg.Done(); q.Run(ctx) }()
	}

	pool := flow.NewPool(8)
	var sizes []int // records per batch, in push order
	src := netip.MustParseAddr("10.0.0.1")
	push := func(until time.Time) {
		b := pool.Get()
		n := len(sizes)%8 + 1
		for i := 0; i < n; i++ {
			r := b.Next()
			r.SrcAddr, r.DstAddr, r.SrcPort, r.DstPort, r.Proto, r.Packets = src, src, uint16(len(sizes)), uint16(i), 17, 1
		}
		sizes = append(sizes, n)
		fan.Push(b, until)
	}

	start := time.Now()
	for ev := 0; ev < evictions; ev++ {
		until := time.Now().Add(budget) // one eviction: one deadline for all its batches
		for i := 0; i < perEvict; i++ {
			push(until)
			if len(sizes) == 1 {
				<-dead.entered // the first batch is in the stuck Export: the count below is exact
			}
		}
	}
	elapsed := time.Since(start)

	// Drain the healthy queue, then stop the stuck one.
	closeCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := healthyQ.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	total, batches := 0, len(sizes)
	for _, n := range sizes {
		total += n
	}
	hs := &healthyQ.Stats
	if d, f := hs.DroppedBatches.Load(), hs.DroppedFlows.Load(); d != 0 || f != 0 {
		t.Errorf("healthy exporter dropped %d batches / %d flows, want 0 (its budget was used up by the stuck one)", d, f)
	}
	if got := hs.Flows.Load(); got != uint64(total) || hs.Batches.Load() != uint64(batches) {
		t.Errorf("healthy exporter exported %d flows in %d batches, want %d in %d", got, hs.Batches.Load(), total, batches)
	}
	if got := sink.lines.Load(); got != uint64(total) {
		t.Errorf("healthy consumer received %d JSON lines, want %d", got, total)
	}
	if hs.WaitNanos.Load() == 0 {
		t.Error("the healthy queue never made the evictor wait: no load, the test proves nothing")
	}

	// The stuck exporter holds the first batch in Export and the last
	// `capacity` in its queue; every batch between was dropped, oldest first.
	wantDropped, wantDroppedFlows := batches-1-capacity, 0
	for _, n := range sizes[1 : batches-capacity] {
		wantDroppedFlows += n
	}
	ds := &deadQ.Stats
	if d, f := ds.DroppedBatches.Load(), ds.DroppedFlows.Load(); d != uint64(wantDropped) || f != uint64(wantDroppedFlows) {
		t.Errorf("stuck exporter dropped %d batches / %d flows, want %d / %d", d, f, wantDropped, wantDroppedFlows)
	}
	if n := deadQ.Len(); n != capacity {
		t.Errorf("stuck queue holds %d batches, want %d (bounded)", n, capacity)
	}
	if ds.Flows.Load() != 0 {
		t.Errorf("stuck exporter exported %d flows", ds.Flows.Load())
	}
	// The first eviction waited for the stuck exporter once, for its
	// budget; the next ones not at all, the exporter having exported
	// nothing since (Queue.budget): its wait is one budget.
	if w := time.Duration(ds.WaitNanos.Load()); w < budget*9/10 || w > budget*13/10 {
		t.Errorf("stuck queue waited %v in %d evictions, want about %v (once)", w, evictions, budget)
	}
	if elapsed > evictions*budget*2 {
		t.Errorf("pushing took %v, more than the stuck exporter's budgets plus the healthy one's work", elapsed)
	}
	// Bounded memory: the batches alive at once are the stuck Export's, the
	// last `capacity`+1 (queued or in the healthy Export) and the one filling.
	if a := pool.Allocated.Load(); a > capacity+3 {
		t.Errorf("pool allocated %d batches, want at most %d", a, capacity+3)
	}

	cancel()
	wg.Wait()
	if err := deadQ.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if ds.Errors.Load() != 1 {
		t.Errorf("stuck exporter: %d failed exports, want 1 (the batch it held when stopped)", ds.Errors.Load())
	}
}

package grpc_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// Acknowledged delivery (acked.go): every flow the collector acknowledged
// was applied once, what broke in flight is sent again and dropped as a
// duplicate when it had been applied, and what does not fit the bound of
// unacknowledged batches is counted, per flow.

// collector is a pkg/receiver server whose handler records flows and runs
// hook (when set) after recording each message, before returning.
type collector struct {
	srv  *receiver.Server
	addr string

	mu     sync.Mutex
	flows  []*flowv1.Flow
	msgs   int
	hook   func(msg int)
	refuse func(msg int) error // before recording: an error refuses the message
	done   chan error
}

func startCollector(t *testing.T, opts receiver.Options) *collector {
	t.Helper()
	c := &collector{done: make(chan error, 1)}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := receiver.New(func(_ context.Context, b *receiver.Batch) error {
		c.mu.Lock()
		c.msgs++
		n, hook := c.msgs, c.hook
		if c.refuse != nil {
			if err := c.refuse(n); err != nil {
				c.mu.Unlock()
				return err
			}
		}
		c.flows = append(c.flows, b.Flows...)
		c.mu.Unlock()
		if hook != nil {
			hook(n)
		}
		return nil
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.srv, c.addr = srv, lis.Addr().String()
	go func() { c.done <- srv.Serve(lis) }()
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *collector) stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.srv.Shutdown(ctx)
}

func (c *collector) received() []*flowv1.Flow {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*flowv1.Flow(nil), c.flows...)
}

// proxy forwards TCP connections to a backend that can change, and cuts
// them all at once: a collector's connection breaking at a chosen moment.
type proxy struct {
	lis net.Listener

	mu      sync.Mutex
	backend string
	paused  bool // refuse connections (close them at once)
	conns   []net.Conn
}

func startProxy(t *testing.T, backend string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis, backend: backend}
	t.Cleanup(func() { lis.Close(); p.cut() })
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			backend, paused := p.backend, p.paused
			p.mu.Unlock()
			if paused {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", backend)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.lis.Addr().String() }

// cut closes every connection the proxy carries.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) set(backend string, paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backend, p.paused = backend, paused
}

// exportAll exports batches 0..n-1 of size flows each and returns them.
func exportAll(t *testing.T, e *grpcexp.Exporter, n, size int) []flow.Record {
	t.Helper()
	var sent []flow.Record
	for b := range n {
		recs := batch(b, size)
		if err := e.Export(ctxT(t, 20*time.Second), recs); err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
		sent = append(sent, recs...)
	}
	return sent
}

// checkFlows asserts got holds exactly the flows of sent, each once.
func checkFlows(t *testing.T, got []*flowv1.Flow, sent []flow.Record) {
	t.Helper()
	seen := map[uint64]int{} // packets identify a flow (batch())
	for _, f := range got {
		seen[f.Packets]++
	}
	for i := range sent {
		if n := seen[sent[i].Packets]; n != 1 {
			t.Fatalf("flow with %d packets received %d times, want once", sent[i].Packets, n)
		}
	}
	if len(got) != len(sent) {
		t.Fatalf("collector applied %d flows, want %d", len(got), len(sent))
	}
}

// closeExporter closes e and asserts the delivery counts: every flow acked.
func checkAllAcked(t *testing.T, e *grpcexp.Exporter, flows int) {
	t.Helper()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	st := &e.Stats
	if st.AckedFlows.Load() != uint64(flows) || st.FailedFlows.Load() != 0 || st.RejectedFlows.Load() != 0 || e.Pending() != 0 {
		t.Fatalf("acked %d, failed %d, rejected %d, pending %d flows; want %d acked, nothing else",
			st.AckedFlows.Load(), st.FailedFlows.Load(), st.RejectedFlows.Load(), e.Pending(), flows)
	}
}

func TestAckedDeliveryExact(t *testing.T) {
	c := startCollector(t, receiver.Options{})
	e := newExporter(t, grpcexp.Config{Target: c.addr, MaxUnackedBatches: 4})
	sent := exportAll(t, e, 20, 50)
	checkAllAcked(t, e, len(sent))
	checkFlows(t, c.received(), sent)
	if d := c.srv.Stats.Duplicates.Load(); d != 0 {
		t.Fatalf("%d duplicates on a healthy stream", d)
	}
	if u := e.Stats.Unacknowledged.Load(); u != 0 {
		t.Fatalf("%d messages sent without acknowledgement", u)
	}
}

// The connection breaks after the collector applied message 3 and before
// its acknowledgement left: the agent sends what is unacknowledged again,
// in order, on a new stream, the collector (same process, state in memory)
// drops what it had applied, and each flow is applied once, in the order
// sent.
func TestAckLostDuplicateDropped(t *testing.T) {
	c := startCollector(t, receiver.Options{})
	p := startProxy(t, c.addr)
	c.hook = func(msg int) {
		if msg == 3 {
			p.cut()
		}
	}
	e := newExporter(t, grpcexp.Config{Target: p.addr(), MaxUnackedBatches: 4})
	sent := exportAll(t, e, 10, 50)
	checkAllAcked(t, e, len(sent))
	got := c.received()
	checkFlows(t, got, sent)
	for i := 1; i < len(got); i++ { // resent in order: applied in the order sent
		if got[i].Packets <= got[i-1].Packets {
			t.Fatalf("flow %d applied after flow %d: out of order", got[i].Packets, got[i-1].Packets)
		}
	}
	// Message 3 at least was applied and not acknowledged (so were the
	// messages whose acknowledgements the cut caught in flight, and any the
	// collector had already read behind it).
	if b, d, f := c.srv.Stats.Batches.Load(), c.srv.Stats.Duplicates.Load(), c.srv.Stats.DuplicateFlows.Load(); b != 10 || d < 1 || f != 50*d {
		t.Fatalf("collector applied %d messages, dropped %d duplicates (%d flows); want 10 applied, at least 1 duplicate of 50 flows each", b, d, f)
	}
	if e.Stats.StreamsOpened.Load() < 2 {
		t.Fatalf("%d streams opened, want a reconnection", e.Stats.StreamsOpened.Load())
	}
}

// The collector applies message 3, its connection breaks before the
// acknowledgement, and the collector is replaced by a new one reading the
// same state file (--ack-state-file): the messages the agent sends again
// that the first had applied are dropped there, and each flow is applied
// once. Without a state file the new collector applies them a second time
// (what the state file is for).
func TestAckStateSurvivesRestart(t *testing.T) {
	for _, durable := range []bool{true, false} {
		name := map[bool]string{true: "state-file", false: "memory-only"}[durable]
		t.Run(name, func(t *testing.T) {
			var opts receiver.Options
			if durable {
				opts.AckStateFile = filepath.Join(t.TempDir(), "acks")
			}
			c1 := startCollector(t, opts)
			p := startProxy(t, c1.addr)
			applied := make(chan struct{})
			c1.hook = func(msg int) {
				if msg == 3 {
					p.set(c1.addr, true) // no reconnection to this collector
					p.cut()
					close(applied)
				}
			}
			e := newExporter(t, grpcexp.Config{Target: p.addr(), MaxUnackedBatches: 8})
			var sent []flow.Record
			for b := range 6 {
				recs := batch(b, 50)
				sent = append(sent, recs...)
				if err := e.Export(ctxT(t, 20*time.Second), recs); err != nil {
					t.Fatal(err)
				}
				if b == 2 {
					<-applied
					c1.stop(t) // gone: what it applied is in its output (received) and, durable, its state file
					c2 := startCollector(t, opts)
					p.set(c2.addr, false)
					defer func() {
						checkAllAcked(t, e, len(sent))
						got := append(c1.received(), c2.received()...)
						if durable {
							checkFlows(t, got, sent)
							if d := c2.srv.Stats.Duplicates.Load(); d < 1 {
								t.Fatalf("new collector dropped %d duplicates, want at least 1 (message 3)", d)
							}
							return
						}
						if extra := len(got) - len(sent); extra < 50 || extra%50 != 0 || c2.srv.Stats.Duplicates.Load() != 0 {
							t.Fatalf("memory only: %d flows applied, %d duplicates dropped; want %d + 50 per message applied twice (message 3 at least), and 0",
								len(got), c2.srv.Stats.Duplicates.Load(), len(sent))
						}
					}()
				}
			}
		})
	}
}

// The collector refuses message 4 for good (receiver.Refuse): the agent
// drops exactly that one, counted in RejectedFlows, and every other flow
// is applied once and acknowledged.
func TestRefusedMessageDropped(t *testing.T) {
	c := startCollector(t, receiver.Options{})
	c.refuse = func(msg int) error {
		if msg == 4 {
			return receiver.Refuse(status.Error(codes.InvalidArgument, "no thanks"))
		}
		return nil
	}
	e := newExporter(t, grpcexp.Config{Target: c.addr, MaxUnackedBatches: 4})
	sent := exportAll(t, e, 8, 50)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	st := &e.Stats
	if st.AckedFlows.Load() != 350 || st.RejectedFlows.Load() != 50 || st.Refused.Load() != 1 || st.FailedFlows.Load() != 0 {
		t.Fatalf("acked %d, rejected %d (%d messages), failed %d flows; want 350, 50 (1), 0",
			st.AckedFlows.Load(), st.RejectedFlows.Load(), st.Refused.Load(), st.FailedFlows.Load())
	}
	checkFlows(t, c.received(), append(sent[:150:150], sent[200:]...))
}

// At most MaxUnackedBatches batches wait for acknowledgements; behind
// them the Queue keeps --export-buffer batches and drops the oldest,
// counted per flow; at Close what was never acknowledged is counted in
// FailedFlows, and what the Queue still held when its budget ran out in
// its ShutdownFlows. Every flow is in exactly one count.
func TestUnackedBoundOverflowCounted(t *testing.T) {
	release := make(chan struct{})
	c := startCollector(t, receiver.Options{})
	c.hook = func(int) { <-release } // applies nothing: no acknowledgement
	t.Cleanup(func() { close(release) })
	e := newExporter(t, grpcexp.Config{Target: c.addr, MaxUnackedBatches: 2})
	q := exporter.NewQueue(e, 2, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ran := make(chan struct{})
	go func() { q.Run(context.Background()); close(ran) }()
	past := time.Now().Add(-time.Second) // no wait budget: drop at once
	push := func(b int) {
		fb := flow.NewPool(100).Get()
		fb.Records = append(fb.Records, batch(b, 100)...)
		q.Push(fb, past)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (pending %d, queued %d)", what, e.Pending(), q.Len())
			}
		}
	}
	push(0)
	waitFor("batch 0 taken", func() bool { return e.Pending() == 100 && q.Len() == 0 })
	push(1)
	waitFor("batch 1 taken", func() bool { return e.Pending() == 200 && q.Len() == 0 })
	push(2)
	waitFor("batch 2 in Export, waiting for room", func() bool { return q.Len() == 0 })
	for b := 3; b < 10; b++ {
		push(b)
	}
	if d := q.Stats.DroppedFlows.Load(); d != 500 {
		t.Fatalf("queue dropped %d flows, want 500 (batches 3..7)", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := q.Close(ctx); err != nil { // the exporter's Close waits CloseTimeout, within the queue's close grace
		t.Fatal(err)
	}
	<-ran
	st := &e.Stats
	if st.FailedFlows.Load() != 300 || st.AckedFlows.Load() != 0 || e.Pending() != 0 {
		t.Fatalf("exporter: failed %d, acked %d, pending %d flows; want 300 failed (2 unacknowledged, 1 waiting)",
			st.FailedFlows.Load(), st.AckedFlows.Load(), e.Pending())
	}
	if s := q.Stats.ShutdownFlows.Load(); s != 200 {
		t.Fatalf("queue: %d flows lost at shutdown, want 200 (the 2 batches it still held)", s)
	}
	if total := q.Stats.DroppedFlows.Load() + q.Stats.ShutdownFlows.Load() + st.FailedFlows.Load() + st.AckedFlows.Load() + st.RejectedFlows.Load(); total != 1000 {
		t.Fatalf("accounted for %d flows, want 1000", total)
	}
}

// A collector without ExportAcked (built before it): the agent falls back
// to Export, at most once, and says so in its counts.
func TestLegacyCollectorAtMostOnce(t *testing.T) {
	received := new(atomic.Uint64)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newSinkOf(received, false)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	e := newExporter(t, grpcexp.Config{Target: addr, MaxUnackedBatches: 2})
	exportAll(t, e, 3, 10)
	for deadline := time.Now().Add(10 * time.Second); received.Load() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sink received %d messages, want 3", received.Load())
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	st := &e.Stats
	if st.Unacknowledged.Load() != 3 || st.AckedFlows.Load() != 0 || st.SendErrors.Load() != 0 || e.Pending() != 0 {
		t.Fatalf("unacknowledged %d messages, acked %d flows, %d send errors, %d pending; want 3, 0, 0, 0",
			st.Unacknowledged.Load(), st.AckedFlows.Load(), st.SendErrors.Load(), e.Pending())
	}
}

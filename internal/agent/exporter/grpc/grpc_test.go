package grpc_test

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
	"github.com/flowlens/flowlens/pkg/receiver"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// batch returns n distinct records; batch b's record i has b*n+i+1 packets
// and 100 times that many bytes, so sums identify what arrived.
func batch(b, n int) []flow.Record {
	t0 := time.Unix(1_700_000_000, 0)
	out := make([]flow.Record, n)
	for i := range out {
		k := uint64(b*n + i + 1)
		out[i] = flow.Record{
			SrcAddr: netip.AddrFrom4([4]byte{10, 1, byte(b), byte(i)}), DstAddr: netip.MustParseAddr("10.2.0.1"),
			SrcPort: uint16(10000 + i), DstPort: 80, Proto: 6, Bytes: 100 * k, Packets: k,
			StartTime: t0, EndTime: t0.Add(time.Second), Sampling: 1,
			Interfaces: []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", NetnsID: 1, Direction: flow.DirEgress}},
		}
	}
	return out
}

func sums(recs []flow.Record) (bytes, packets uint64) {
	for i := range recs {
		bytes += recs[i].Bytes
		packets += recs[i].Packets
	}
	return
}

// fast makes reconnection quick in tests.
func fast(cfg grpcexp.Config) grpcexp.Config {
	cfg.BackoffBase = 20 * time.Millisecond
	cfg.BackoffMax = 200 * time.Millisecond
	cfg.ConnectTimeout = time.Second
	if cfg.NodeName == "" {
		cfg.NodeName = "node-a"
	}
	return cfg
}

func newExporter(t *testing.T, cfg grpcexp.Config) *grpcexp.Exporter {
	t.Helper()
	e, err := grpcexp.New(fast(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// checkExact asserts the collector received exactly the flows of sent.
func checkExact(t *testing.T, rec *receivertest.Recorder, sent []flow.Record) {
	t.Helper()
	got := rec.Flows()
	if len(got) != len(sent) {
		t.Fatalf("collector received %d flows, want %d", len(got), len(sent))
	}
	gb, gp := receivertest.Sums(got)
	wb, wp := sums(sent)
	if gb != wb || gp != wp {
		t.Fatalf("collector sums bytes=%d packets=%d, want %d and %d", gb, gp, wb, wp)
	}
	// Every flow arrived once, intact (same JSON as the agent prints).
	want := make([]string, len(sent))
	for i := range sent {
		want[i] = string(sent[i].AppendJSON(nil))
	}
	back, err := flowpb.ToRecords(nil, got)
	if err != nil {
		t.Fatal(err)
	}
	have := make([]string, len(back))
	for i := range back {
		have[i] = string(back[i].AppendJSON(nil))
	}
	sort.Strings(want)
	sort.Strings(have)
	for i := range want {
		if want[i] != have[i] {
			t.Fatalf("flow differs:\n got %s\nwant %s", have[i], want[i])
		}
	}
}

// Through the Queue, as the agent runs it: every flow arrives, once.
func TestExportExactPlaintext(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{})
	exp := newExporter(t, grpcexp.Config{Target: rec.Addr})
	q := exporter.NewQueue(exp, 64, nil)
	go q.Run(context.Background())
	var sent []flow.Record
	for b := 0; b < 20; b++ {
		recs := batch(b, 500)
		sent = append(sent, recs...)
		q.Push(flow.BatchOf(recs), time.Time{})
	}
	if err := q.Close(ctxT(t, 10*time.Second)); err != nil { // drains, then closes the stream
		t.Fatal(err)
	}
	checkExact(t, rec, sent)
	if q.Stats.Batches.Load() != 20 || q.Stats.Flows.Load() != 10000 || q.Stats.DroppedBatches.Load() != 0 || q.Stats.Errors.Load() != 0 {
		t.Fatalf("queue stats: batches=%d flows=%d dropped=%d errors=%d", q.Stats.Batches.Load(), q.Stats.Flows.Load(),
			q.Stats.DroppedBatches.Load(), q.Stats.Errors.Load())
	}
	if exp.Stats.StreamsOpened.Load() != 1 || exp.Stats.Messages.Load() != 20 {
		t.Fatalf("streams=%d messages=%d, want 1 and 20", exp.Stats.StreamsOpened.Load(), exp.Stats.Messages.Load())
	}
	f := rec.Flows()[0]
	if f.NodeName != "node-a" || flowpb.Addr(f.AgentIp) != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("identity: node %q agent ip %v (learned from the connection)", f.NodeName, flowpb.Addr(f.AgentIp))
	}
}

func TestExportExactMTLS(t *testing.T) {
	pki := receivertest.NewPKI(t)
	tlsCfg, err := receiver.ServerTLS(pki.ServerCert, pki.ServerKey, pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	rec := receivertest.Start(t, receiver.Options{TLS: tlsCfg})
	exp := newExporter(t, grpcexp.Config{Target: rec.Addr, TLSCA: pki.CA, TLSCert: pki.ClientCert, TLSKey: pki.ClientKey,
		AgentIP: netip.MustParseAddr("192.0.2.7")})
	var sent []flow.Record
	for b := 0; b < 5; b++ {
		recs := batch(b, 300)
		sent = append(sent, recs...)
		if err := exp.Export(ctxT(t, 10*time.Second), recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	checkExact(t, rec, sent)
	if p := rec.Peers(); p[pki.ClientCN] != 5 || len(p) != 1 {
		t.Fatalf("batches by client certificate: %v, want 5 from %q", p, pki.ClientCN)
	}
	if ip := flowpb.Addr(rec.Flows()[0].AgentIp); ip != netip.MustParseAddr("192.0.2.7") {
		t.Fatalf("agent ip %v, want the configured one", ip)
	}

	// Agents without an acceptable client certificate get nothing through.
	for name, cfg := range map[string]grpcexp.Config{
		"no client certificate":     {TLSCA: pki.CA},
		"certificate of other CA":   {TLSCA: pki.CA, TLSCert: pki.OtherCert, TLSKey: pki.OtherKey},
		"collector not trusted":     {TLSCA: pki.OtherCA, TLSCert: pki.ClientCert, TLSKey: pki.ClientKey},
		"plaintext to a TLS server": {},
	} {
		cfg.Target = rec.Addr
		cfg.RetryTimeout = 300 * time.Millisecond
		e := newExporter(t, cfg)
		if err := e.Export(context.Background(), batch(9, 10)); err == nil {
			t.Errorf("%s: export succeeded", name)
		}
	}
	if rec.Count() != len(sent) {
		t.Fatalf("collector has %d flows, want %d", rec.Count(), len(sent))
	}
}

func TestTLSFilesCheckedAtStart(t *testing.T) {
	for name, cfg := range map[string]grpcexp.Config{
		"missing CA":       {TLSCA: "/nonexistent/ca.crt"},
		"cert without key": {TLSCert: "/nonexistent/c.crt"},
		"no target":        {},
	} {
		if name != "no target" {
			cfg.Target = "127.0.0.1:1"
		}
		if _, err := grpcexp.New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// The collector restarts: Export gets the batch through on a new stream.
func TestReconnectAfterCollectorRestart(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{})
	exp := newExporter(t, grpcexp.Config{Target: rec.Addr})
	first := batch(0, 100)
	if err := exp.Export(ctxT(t, 10*time.Second), first); err != nil {
		t.Fatal(err)
	}
	rec.WaitCount(len(first), 5*time.Second)
	rec.Stop()
	// Let the agent's side see the stream end: a batch written into a
	// connection in the instant it breaks is lost (at-most-once delivery).
	time.Sleep(200 * time.Millisecond)

	down := make(chan error, 1)
	second := batch(1, 100)
	go func() { down <- exp.Export(ctxT(t, 20*time.Second), second) }()
	time.Sleep(300 * time.Millisecond) // Export retries meanwhile
	select {
	case err := <-down:
		t.Fatalf("Export returned %v while the collector was down", err)
	default:
	}
	if exp.Connected() {
		t.Fatal("Connected() with the collector down")
	}
	rec2 := receivertest.StartAt(t, rec.Addr, receiver.Options{})
	if err := <-down; err != nil {
		t.Fatalf("Export after the collector came back: %v", err)
	}
	if !exp.Connected() {
		t.Fatal("not Connected() after a successful export")
	}
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	checkExact(t, rec2, second)
	if n := exp.Stats.StreamsOpened.Load(); n != 2 {
		t.Fatalf("%d streams opened, want 2", n)
	}
	if exp.Stats.Retries.Load() == 0 || exp.Stats.SendErrors.Load() != 1 {
		t.Fatalf("retries=%d stream_errors=%d", exp.Stats.Retries.Load(), exp.Stats.SendErrors.Load())
	}
}

// No collector at start: batches wait in the queue and go out once it is up.
func TestCollectorDownAtStart(t *testing.T) {
	addr := testkit.FreeAddr(t)
	exp := newExporter(t, grpcexp.Config{Target: addr})
	q := exporter.NewQueue(exp, 64, nil)
	go q.Run(context.Background())
	var sent []flow.Record
	for b := 0; b < 10; b++ {
		recs := batch(b, 50)
		sent = append(sent, recs...)
		q.Push(flow.BatchOf(recs), time.Time{})
	}
	time.Sleep(500 * time.Millisecond)
	if exp.Stats.Messages.Load() != 0 {
		t.Fatal("messages sent with no collector")
	}
	rec := receivertest.StartAt(t, addr, receiver.Options{})
	if err := q.Close(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkExact(t, rec, sent)
	if q.Stats.DroppedBatches.Load() != 0 || q.Stats.Errors.Load() != 0 {
		t.Fatalf("dropped=%d errors=%d", q.Stats.DroppedBatches.Load(), q.Stats.Errors.Load())
	}
}

// The collector goes away mid-run: the agent side keeps going, the queue
// stays bounded and counts what it drops; when the collector is back the
// newest batches go out, and every batch is either delivered or counted.
func TestCollectorStoppedMidRun(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{})
	exp := newExporter(t, grpcexp.Config{Target: rec.Addr})
	const capacity = 4
	q := exporter.NewQueue(exp, capacity, slog.New(slog.DiscardHandler))
	go q.Run(context.Background())

	pushed := 0
	for b := 0; b < capacity; b++ {
		q.Push(flow.BatchOf(batch(b, 20)), time.Time{})
		pushed++
	}
	rec.WaitCount(capacity*20, 5*time.Second)
	rec.Stop()
	time.Sleep(200 * time.Millisecond) // see TestReconnectAfterCollectorRestart

	goroutines := runtime.NumGoroutine()
	for b := capacity; b < 204; b++ {
		q.Push(flow.BatchOf(batch(b, 20)), time.Time{})
		pushed++
		if q.Len() > capacity {
			t.Fatalf("queue holds %d batches, capacity %d", q.Len(), capacity)
		}
		if b%20 == 0 {
			time.Sleep(20 * time.Millisecond) // several reconnection attempts happen
		}
	}
	if g := runtime.NumGoroutine(); g > goroutines+10 {
		t.Fatalf("goroutines grew from %d to %d while retrying", goroutines, g)
	}
	dropped := q.Stats.DroppedBatches.Load()
	// 200 pushed while down: at most capacity queued plus one in Export.
	if dropped < 200-capacity-1 {
		t.Fatalf("dropped %d batches, want at least %d", dropped, 200-capacity-1)
	}
	if exp.Connected() {
		t.Fatal("Connected() with the collector down")
	}
	if q.Stats.DroppedFlows.Load() != dropped*20 {
		t.Fatalf("dropped flows %d for %d batches", q.Stats.DroppedFlows.Load(), dropped)
	}

	rec2 := receivertest.StartAt(t, rec.Addr, receiver.Options{})
	if err := q.Close(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	delivered := uint64(rec.Count() + rec2.Count())
	if q.Stats.Errors.Load() != 0 {
		t.Fatalf("%d export errors; a down collector should block and retry", q.Stats.Errors.Load())
	}
	if got := q.Stats.Flows.Load() + q.Stats.DroppedFlows.Load(); got != uint64(pushed*20) {
		t.Fatalf("exported %d + dropped %d flows != pushed %d", q.Stats.Flows.Load(), q.Stats.DroppedFlows.Load(), pushed*20)
	}
	if delivered != q.Stats.Flows.Load() {
		t.Fatalf("collectors received %d flows, queue exported %d", delivered, q.Stats.Flows.Load())
	}
	// The newest batch is among the delivered ones.
	last := rec2.Flows()[rec2.Count()-1]
	if last.Packets != uint64(203*20+20) {
		t.Fatalf("last flow delivered has %d packets, want the newest batch's last (%d)", last.Packets, 203*20+20)
	}
}

// A batch larger than MaxMessageBytes goes out as several messages under
// the collector's limit.
func TestLargeBatchSplit(t *testing.T) {
	const limit = 32 << 10
	rec := receivertest.Start(t, receiver.Options{MaxMessageBytes: limit})
	exp := newExporter(t, grpcexp.Config{Target: rec.Addr, MaxMessageBytes: limit})
	recs := batch(0, 5000)
	if err := exp.Export(ctxT(t, 10*time.Second), recs); err != nil {
		t.Fatal(err)
	}
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	checkExact(t, rec, recs)
	msgs := exp.Stats.Messages.Load()
	if msgs < 2 || int(msgs) != rec.Batches() {
		t.Fatalf("%d messages sent, %d received; want several", msgs, rec.Batches())
	}
	if avg := exp.Stats.Bytes.Load() / msgs; avg > limit {
		t.Fatalf("average message %d bytes > limit %d", avg, limit)
	}
}

// A collector refusing a message (here: too big for it) ends the stream;
// the refusal is seen by the next send, whose message had not left yet: it
// goes out on a new stream, so only the refused message is lost.
func TestRefusalCostsOnlyTheRefusedMessage(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{MaxMessageBytes: 16 << 10})
	exp := newExporter(t, grpcexp.Config{Target: rec.Addr}) // 4 MiB messages
	if err := exp.Export(ctxT(t, 10*time.Second), batch(0, 2000)); err != nil {
		t.Fatalf("the send of a message the collector will refuse: %v", err)
	}
	// Let the refusal reach the agent before the next send.
	deadline := time.Now().Add(5 * time.Second)
	for rec.Server.Stats.Rejected.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	small := batch(1, 10)
	if err := exp.Export(ctxT(t, 10*time.Second), small); err != nil {
		t.Fatal(err)
	}
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	checkExact(t, rec, small)
	if exp.Stats.Refused.Load() != 1 || exp.Stats.StreamsOpened.Load() != 2 {
		t.Fatalf("refused=%d streams=%d, want 1 and 2", exp.Stats.Refused.Load(), exp.Stats.StreamsOpened.Load())
	}
}

// Close aborts an Export blocked on an unreachable collector.
func TestCloseAbortsBlockedExport(t *testing.T) {
	exp := newExporter(t, grpcexp.Config{Target: testkit.FreeAddr(t)})
	done := make(chan error, 1)
	go func() { done <- exp.Export(context.Background(), batch(0, 10)) }()
	time.Sleep(200 * time.Millisecond)
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, grpcexp.ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Export still blocked after Close")
	}
	if err := exp.Export(context.Background(), batch(1, 1)); !errors.Is(err, grpcexp.ErrClosed) {
		t.Fatalf("Export after Close: %v", err)
	}
}

// A name that is not valid UTF-8 (any bytes make an interface name) costs
// neither its flow nor its batch: it arrives with U+FFFD in place of the
// invalid bytes, where marshalling it as is fails.
func TestExportInvalidUTF8(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{})
	exp := newExporter(t, grpcexp.Config{Target: rec.Addr})
	recs := batch(0, 3)
	recs[1].Interfaces = []flow.Interface{{Name: "eth\xff0", Ifindex: 2, Netns: "host", Direction: flow.DirIngress}}
	if err := exp.Export(ctxT(t, 10*time.Second), recs); err != nil {
		t.Fatal(err)
	}
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	recs[1].Interfaces[0].Name = "eth\uFFFD0"
	checkExact(t, rec, recs)
	if r := exp.Stats.Refused.Load(); r != 0 {
		t.Fatalf("%d refusals", r)
	}
}

// The agent's messages stay within the collector's default limits: under
// its message size, and a batch of more flows than a message may carry
// goes out as several, whatever the size limit (here large enough for
// the whole batch: only the flow count splits it), every flow arriving
// once.
func TestMessagesWithinCollectorDefaults(t *testing.T) {
	if grpcexp.DefaultMaxMessageBytes > receiver.DefaultMaxMessageBytes {
		t.Fatalf("the agent's messages (%d bytes) may exceed the collector's default limit (%d)",
			grpcexp.DefaultMaxMessageBytes, receiver.DefaultMaxMessageBytes)
	}
	rec := receivertest.Start(t, receiver.Options{MaxMessageBytes: 256 << 20})
	exp := newExporter(t, grpcexp.Config{Target: rec.Addr, MaxMessageBytes: 256 << 20})
	recs := batch(0, 2*flowpb.MaxFlowsPerMessage+5)
	if err := exp.Export(ctxT(t, time.Minute), recs); err != nil {
		t.Fatal(err)
	}
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rec.Count(); n != len(recs) {
		t.Fatalf("collector received %d flows, want %d", n, len(recs))
	}
	gb, gp := receivertest.Sums(rec.Flows())
	if wb, wp := sums(recs); gb != wb || gp != wp {
		t.Fatalf("collector sums bytes=%d packets=%d, want %d and %d", gb, gp, wb, wp)
	}
	if n := rec.Server.Stats.Rejected.Load(); n != 0 {
		t.Errorf("%d messages refused", n)
	}
	if m := exp.Stats.Messages.Load(); m != 3 || rec.Batches() != 3 {
		t.Errorf("%d messages sent, %d received; want 3 (100000, 100000 and 5 flows)", m, rec.Batches())
	}
}

package grpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	grpcgo "google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// Acknowledged delivery (docs/design/faults.md, "Acknowledged delivery
// over gRPC"). Every message gets the next seq of this process's instance
// and stays in pending until the collector acknowledges it (cumulatively:
// an ExportAck for seq acknowledges every message up to it). A broken
// stream is replaced after the backoff and everything pending is sent
// again, in order; the collector drops what it had applied. The cost is
// per message, never per flow: a seq, one small reply, and a buffer kept
// until the reply (buffers are reused).

// pendingMsg is a message sent, or to send, and not yet acknowledged.
type pendingMsg struct {
	seq     uint64
	wire    []byte // FlowBatch bytes: the flows, then the batch identity
	flows   int
	last    bool // the last message of its batch
	counted bool // in Stats.Messages (once, however often it is resent)
}

// stream is one open Export or ExportAcked stream.
type stream struct {
	cs     grpcgo.ClientStream
	legacy bool // Export: no acknowledgements, a message sent is done with
	cancel context.CancelFunc
	done   chan struct{} // ExportAcked: the reader returned
	err    error         // the reader's error, set before done is closed
	// refused says the collector refused a message for good
	// (ExportAck.refused): the one of refusedSeq, or with 0 the first not
	// acknowledged. Set before done is closed.
	refused    bool
	refusedSeq uint64
}

// newInstance is this process's agent_instance: the node name (bytes
// outside printable ASCII replaced) and 8 random bytes in hex, so that a
// restarted agent is a new instance whose seq starts again at 1.
func newInstance(node string) string {
	b := []byte(node)
	if len(b) == 0 {
		b = []byte("agent")
	}
	if len(b) > 253 {
		b = b[:253]
	}
	for i, c := range b {
		if c < '!' || c > '~' {
			b[i] = '_'
		}
	}
	var id [8]byte
	rand.Read(id[:])
	return string(b) + "/" + hex.EncodeToString(id[:])
}

// Instance is the exporter's agent_instance, as the collector sees it.
func (e *Exporter) Instance() string { return e.instance }

// Pending is the number of flows taken and not yet acknowledged, refused
// or counted as failed (as of the last look at the acknowledgements).
func (e *Exporter) Pending() int { return int(e.pendingFlows.Load()) }

// Export takes the batch: it waits, while MaxUnackedBatches batches are
// unacknowledged, for acknowledgements (reconnecting and sending the
// pending messages again when the stream breaks), then sends the batch, as
// one message or several under MaxMessageBytes, and returns without
// waiting for its acknowledgement. Once taken, a batch is the exporter's:
// it is acknowledged, refused by the collector (RejectedFlows), or counted
// in FailedFlows at Close. A batch Export could not take (ctx ended,
// RetryTimeout passed, Close) is counted in FailedFlows and its error
// returned.
func (e *Exporter) Export(ctx context.Context, batch []flow.Record) error {
	if len(batch) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.life.Err() != nil {
		e.Stats.FailedFlows.Add(uint64(len(batch)))
		return ErrClosed
	}
	ctx, release := exporter.Bind(ctx, e.life)
	defer release()
	if e.cfg.RetryTimeout > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, e.cfg.RetryTimeout)
		defer c()
	}
	// Connect first: the agent IP may be learned from the connection.
	err := e.ensureStream(ctx)
	if err == nil {
		err = e.waitRoom(ctx)
	}
	if err != nil {
		e.Stats.FailedFlows.Add(uint64(len(batch)))
		return e.abortErr(ctx, err)
	}
	e.updateIdentity()
	e.enqueue(batch)
	// The batch is taken: what does not go out now goes out with the next
	// Export, or is counted at Close.
	e.flush(ctx)
	return nil
}

// waitRoom returns once fewer than MaxUnackedBatches batches are
// unacknowledged.
func (e *Exporter) waitRoom(ctx context.Context) error {
	return e.waitAcks(ctx, func() bool { return e.pendingBatches < e.cfg.MaxUnackedBatches })
}

// waitAcks returns once enough is acknowledged (enough reports it), sending
// the pending messages again on a new stream when the stream breaks, or
// ctx's error.
func (e *Exporter) waitAcks(ctx context.Context, enough func() bool) error {
	for {
		e.trimAcked()
		if enough() {
			return nil
		}
		if e.stream == nil || e.sent < len(e.pending) {
			if err := e.flush(ctx); err != nil {
				return err
			}
			continue
		}
		select {
		case <-e.ackWake:
		case <-e.stream.done:
			e.broken(e.stream.err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// enqueue encodes the batch into its messages, each with the next seq,
// into pending.
func (e *Exporter) enqueue(batch []flow.Record) {
	cuts, offs := e.encode(batch)
	n := len(cuts) - 1
	for i := range n {
		e.seq++
		var w []byte
		if n == 1 { // the common case: the batch's buffer is the message
			flowpb.AppendBatchID(e.buf[:0], e.instance, e.seq) // into the room encode left
			w = e.buf
			e.buf = e.takeBuf()
		} else {
			w = flowpb.AppendBatchID(e.takeBuf(), e.instance, e.seq)
			w = append(w, e.buf[offs[i]:offs[i+1]]...)
		}
		e.pending = append(e.pending, pendingMsg{seq: e.seq, wire: w, flows: cuts[i+1] - cuts[i], last: i == n-1})
	}
	e.pendingFlows.Add(int64(len(batch)))
	e.pendingBatches++
}

func (e *Exporter) takeBuf() []byte { return e.lender.take() }

// trimAcked drops the acknowledged messages from pending.
func (e *Exporter) trimAcked() {
	a := e.acked.Load()
	k := 0
	for k < len(e.pending) && e.pending[k].seq <= a {
		e.done(k, &e.Stats.AckedFlows)
		k++
	}
	e.popFront(k)
}

// done counts pending[k]'s flows in c and recycles its buffer.
func (e *Exporter) done(k int, c interface{ Add(uint64) uint64 }) {
	m := &e.pending[k]
	c.Add(uint64(m.flows))
	e.pendingFlows.Add(-int64(m.flows))
	if m.last {
		e.pendingBatches--
	}
	e.lender.release(m.wire)
	m.wire = nil
}

func (e *Exporter) popFront(k int) {
	if k == 0 {
		return
	}
	n := copy(e.pending, e.pending[k:])
	clear(e.pending[n:])
	e.pending = e.pending[:n]
	e.sent = max(e.sent-k, 0)
}

// flush sends every pending message the current stream has not carried,
// opening a stream (after the backoff) as needed, until they all went out
// or ctx ends.
func (e *Exporter) flush(ctx context.Context) error {
	for e.sent < len(e.pending) {
		if err := e.ensureStream(ctx); err != nil {
			return err
		}
		m := &e.pending[e.sent]
		e.msg.wire, e.msg.lend = m.wire, !e.stream.legacy
		err := e.send(ctx)
		e.msg.wire = nil
		if err != nil {
			if ctx.Err() != nil { // our own cancellation, not the collector's doing
				e.dropStream()
				return err
			}
			if !errors.Is(err, io.EOF) && !retryable(err) {
				// gRPC would not send this message: resending cannot help.
				e.Stats.Refused.Add(1)
				e.done(e.sent, &e.Stats.RejectedFlows)
				e.removeAt(e.sent)
				e.refusedLog(err)
				continue
			}
			e.broken(e.endStatus(err))
			continue
		}
		if !m.counted {
			m.counted = true
			e.Stats.Messages.Add(1)
			e.Stats.Records.Add(uint64(m.flows))
			e.Stats.Bytes.Add(uint64(len(m.wire)))
		}
		e.sent++
		if e.stream.legacy { // at most once: done with once sent
			e.Stats.Unacknowledged.Add(1)
			e.done(0, nopCounter{})
			e.popFront(1)
		}
	}
	return nil
}

type nopCounter struct{}

func (nopCounter) Add(uint64) uint64 { return 0 }

func (e *Exporter) removeAt(k int) {
	e.pending = append(e.pending[:k], e.pending[k+1:]...)
	if k < e.sent {
		e.sent--
	}
}

// endStatus is the status that ended the stream a send failed on: with
// io.EOF the collector ended it, and its status comes with the reply (the
// timer only guards against a stuck peer).
func (e *Exporter) endStatus(sendErr error) error {
	if !errors.Is(sendErr, io.EOF) {
		return sendErr
	}
	st := e.stream
	t := time.AfterFunc(5*time.Second, st.cancel)
	defer t.Stop()
	if st.legacy {
		err := st.cs.RecvMsg(new(flowv1.ExportSummary))
		if err == nil {
			err = status.Error(codes.Unavailable, "collector ended the stream")
		}
		return err
	}
	<-st.done
	return st.err
}

// broken ends the current stream, which err ended: a collector without
// ExportAcked makes the exporter use Export; a message the collector
// refused for good is dropped (ExportAcked: the one its ExportAck named;
// Export: one already sent, counted only); any failure waits for the
// backoff. Everything else pending is sent again on the next stream.
func (e *Exporter) broken(err error) {
	st := e.stream
	if err == nil || errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "collector ended the stream")
	}
	refused, refusedSeq := false, uint64(0)
	if !st.legacy && st.done != nil {
		select {
		case <-st.done:
			refused, refusedSeq = st.refused, st.refusedSeq
		default:
		}
	}
	if !st.legacy && !refused && status.Code(err) == codes.ResourceExhausted && strings.Contains(status.Convert(err).Message(), "larger than max") {
		// gRPC refused the message for its size before the collector could
		// name it: the first one not acknowledged, the one being read.
		refused = true
	}
	e.trimAcked()
	e.dropStream()
	if !st.legacy && (status.Code(err) == codes.Unimplemented ||
		// A collector before ExportAcked whose per-call authorization
		// refuses the methods it does not know.
		status.Code(err) == codes.PermissionDenied && strings.HasSuffix(status.Convert(err).Message(), flowv1.FlowCollector_ExportAcked_FullMethodName)) {
		e.legacy = true
		if !e.legacyLogged {
			e.legacyLogged = true
			e.log.Warn("the collector does not acknowledge flows (a version without ExportAcked): delivery is at most once", "error", err)
		}
		return // at once, no backoff
	}
	e.Stats.SendErrors.Add(1)
	e.Stats.Retries.Add(1)
	switch {
	case refused:
		for k := range e.pending {
			if e.pending[k].seq == refusedSeq || refusedSeq == 0 {
				e.Stats.Refused.Add(1)
				e.done(k, &e.Stats.RejectedFlows)
				e.removeAt(k)
				break
			}
		}
		e.refusedLog(err)
	case st.legacy && !retryable(err):
		e.Stats.Refused.Add(1)
		e.refusedLog(err)
	}
	// Otherwise the stream itself was refused (authentication, too many
	// streams...) or broke: no message is dropped, all are sent again
	// after the backoff (failed logs it).
	if st.legacy {
		e.legacy = false // try ExportAcked again: the collector may have been upgraded
	}
	e.failed(err)
}

// abortErr is what Export returns when it gives up: ErrClosed after Close,
// else err with the reason.
func (e *Exporter) abortErr(ctx context.Context, err error) error {
	if e.life.Err() != nil {
		return ErrClosed
	}
	return fmt.Errorf("collector unreachable (%w): %w", context.Cause(ctx), err)
}

// updateIdentity stamps the learned local IP once it is known.
func (e *Exporter) updateIdentity() {
	if e.cfg.AgentIP.IsValid() {
		return
	}
	if p := e.localIP.Load(); p != nil && *p != e.identityIP {
		e.identityIP = *p
		e.enc.SetIdentity(e.cfg.NodeName, flowpb.AddrBytes(*p))
	}
}

// encode writes batch into e.buf as FlowBatch wire bytes, after room for
// the batch identity (flowpb.BatchIDLen: the identity goes first in every
// message, so a receiver finds it without reading the flows), and returns
// the boundaries of the messages it goes out in, so each stays under
// MaxMessageBytes with its identity (a flow alone may not) and
// flowpb.MaxFlowsPerMessage flows: message i is flows cuts[i]..cuts[i+1],
// bytes e.buf[offs[i]:offs[i+1]]; cuts is [0, n] when the whole batch
// fits. A FlowBatch is only its fields, so any run of flows is a message.
func (e *Exporter) encode(batch []flow.Record) (cuts, offs []int) {
	hdr := flowpb.BatchIDLen(e.instance)
	buf := slices.Grow(e.buf[:0], hdr)[:hdr]
	limit := max(e.cfg.MaxMessageBytes-hdr, 1)
	cuts, offs = append(e.cuts[:0], 0), append(e.offs[:0], hdr)
	for i := range batch {
		start := len(buf)
		buf = e.enc.Append(buf, &batch[i])
		last := offs[len(offs)-1]
		if start > last && (len(buf)-last > limit || i-cuts[len(cuts)-1] == flowpb.MaxFlowsPerMessage) {
			cuts, offs = append(cuts, i), append(offs, start)
		}
	}
	cuts, offs = append(cuts, len(batch)), append(offs, len(buf))
	e.buf, e.cuts, e.offs = buf, cuts, offs
	return cuts, offs
}

// ensureStream opens a stream unless one is open, waiting for the backoff
// after a failure. A new stream carries everything pending again.
func (e *Exporter) ensureStream(ctx context.Context) error {
	for e.stream == nil {
		if wait := time.Until(e.nextAttempt); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		// The stream outlives this call (it serves later batches): its
		// context is its own, cancelled with ctx only while opening.
		sctx, cancel := context.WithCancel(context.Background())
		stop := context.AfterFunc(ctx, cancel)
		// Not WaitForReady: while the connection is down this fails at once
		// (Unavailable) and the backoff here paces the attempts.
		st, err := e.openStream(sctx, e.legacy)
		stop()
		if err == nil && sctx.Err() != nil {
			err = sctx.Err()
		}
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return err
			}
			e.failed(err)
			continue
		}
		st.cancel = cancel
		e.stream, e.sent = st, 0
		e.Stats.StreamsOpened.Add(1)
		if !st.legacy {
			st.done = make(chan struct{})
			go e.readAcks(st)
		}
		// The stream is only known to work once a message went through:
		// failures and the connected state are reset in send.
	}
	return nil
}

// openStream opens an ExportAcked (or, legacy, Export) stream that sends
// encodedBatch messages (the generated client only takes *flowv1.FlowBatch).
func (e *Exporter) openStream(ctx context.Context, legacy bool) (*stream, error) {
	desc, method := &flowv1.FlowCollector_ServiceDesc.Streams[1], flowv1.FlowCollector_ExportAcked_FullMethodName
	if legacy {
		desc, method = &flowv1.FlowCollector_ServiceDesc.Streams[0], flowv1.FlowCollector_Export_FullMethodName
	}
	s, err := e.conn.NewStream(ctx, desc, method, grpcgo.StaticMethod(), grpcgo.ForceCodecV2(e.codec))
	if err != nil {
		return nil, err
	}
	return &stream{cs: s, legacy: legacy}, nil
}

// readAcks records the stream's acknowledgements until it ends.
func (e *Exporter) readAcks(st *stream) {
	var ack flowv1.ExportAck
	for {
		if err := st.cs.RecvMsg(&ack); err != nil {
			st.err = err
			close(st.done)
			signal(e.ackWake)
			return
		}
		if ack.Refused {
			st.refused, st.refusedSeq = true, ack.Seq
			continue
		}
		for a := e.acked.Load(); ack.Seq > a && !e.acked.CompareAndSwap(a, ack.Seq); a = e.acked.Load() {
		}
		signal(e.ackWake)
	}
}

// signal wakes one waiter without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// send writes e.msg on the stream; ctx cancels a Send blocked by flow
// control (a slow collector).
func (e *Exporter) send(ctx context.Context) error {
	stop := context.AfterFunc(ctx, e.stream.cancel)
	defer stop()
	if err := e.stream.cs.SendMsg(&e.msg); err != nil {
		return err
	}
	if e.failures > 0 || !e.connected.Load() {
		e.log.Info("sending flows to the collector", "after_failures", e.failures, "acknowledged", !e.stream.legacy)
		e.failures = 0
		e.nextAttempt = time.Time{}
	}
	e.connected.Store(true)
	return nil
}

func (e *Exporter) dropStream() {
	if e.stream == nil {
		return
	}
	e.stream.cancel()
	e.stream = nil
	e.sent = 0
	e.connected.Store(false)
}

// refusedLog logs a refusal by the collector at most every 30 s.
func (e *Exporter) refusedLog(err error) {
	if time.Since(e.lastRefusalLog) > 30*time.Second {
		e.lastRefusalLog = time.Now()
		e.log.Error("the collector refused flows (lost); check the agent's and collector's limits and versions",
			"refused_total", e.Stats.Refused.Load(), "error", err)
	}
}

// CloseTimeout bounds Close: delivering what is pending (reconnecting
// when the stream broke) and ending the stream. It is the close grace the
// agent's shutdown gives every exporter (config.ExportCloseGrace) less a
// second, in which Close ends the stream, counts what was never
// acknowledged and returns: a Close that took the whole grace raced the
// queue's own wait and was left behind uncounted.
const CloseTimeout = config.ExportCloseGrace - time.Second

// Close delivers what is pending, reconnecting when needed, and waits for
// its acknowledgement, within CloseTimeout; ends the stream, aborts an
// Export still retrying, closes the connection, and counts what was never
// acknowledged in FailedFlows.
func (e *Exporter) Close() error {
	e.lifeCancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	if len(e.pending) > 0 {
		e.waitAcks(ctx, func() bool { return len(e.pending) == 0 })
	}
	if st := e.stream; st != nil {
		stop := context.AfterFunc(ctx, st.cancel)
		st.cs.CloseSend()
		var err error
		if st.legacy {
			var sum flowv1.ExportSummary
			if err = st.cs.RecvMsg(&sum); err == nil {
				e.log.Info("stream closed", "collector_batches", sum.GetBatches(), "collector_flows", sum.GetFlows())
			}
		} else {
			<-st.done
			if err = st.err; errors.Is(err, io.EOF) {
				err = nil
			}
			e.trimAcked()
		}
		if err != nil {
			if st.legacy && !retryable(err) {
				e.Stats.Refused.Add(1)
				e.refusedLog(err)
			} else {
				e.log.Warn("closing the stream", "error", err)
			}
		}
		stop()
		st.cancel()
		e.stream = nil
	}
	lost := 0
	for k := range e.pending {
		lost += e.pending[k].flows
		e.done(k, &e.Stats.FailedFlows)
	}
	e.popFront(len(e.pending))
	if lost > 0 {
		e.log.Error("flows the collector never acknowledged (lost)", "flows", lost)
	}
	e.connected.Store(false)
	return e.conn.Close()
}

package receiver

import (
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// ExportAcked implements flowv1.FlowCollectorServer: one call per agent
// stream, every message acknowledged once applied. Each message carries
// its batch identity (agent_instance, seq); a message whose seq is not
// above the last one applied for its instance is a duplicate (the agent
// sent it again after a broken stream): it is acknowledged and not handed
// to the Handler again (Stats.Duplicates). Messages of one instance are
// applied one at a time, even across streams, so that a stream the agent
// abandoned and its replacement never apply the same message twice.
func (s *Server) ExportAcked(stream grpc.BidiStreamingServer[flowv1.FlowBatch, flowv1.ExportAck]) error {
	ctx := stream.Context()
	p, end, err := s.openStream(ctx, "agent stream opened (acknowledged)")
	if err != nil {
		return err
	}
	defer end()

	done := make(chan error, 1)
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		done <- s.receiveAcked(stream, p)
	}()
	select {
	case err := <-done:
		return err
	case <-s.draining:
		return status.Error(codes.Unavailable, "collector: shutting down")
	}
}

// receiveAcked handles and acknowledges messages until the agent closes
// the stream (nil) or something goes wrong (a gRPC status).
func (s *Server) receiveAcked(stream grpc.ServerStream, p Peer) error {
	ctx := stream.Context()
	acks := newAckSender(stream)
	defer acks.stop()
	loggedDup := false
	for {
		t := &decodeTarget{withID: true}
		err := stream.RecvMsg(t)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if status.Code(err) == codes.ResourceExhausted {
				s.Stats.Rejected.Add(1)
				// gRPC has already ended the stream with its status ("received
				// message larger than max"), which the agent recognises.
				s.log.Warn("refused an oversized message", "peer", p.Addr, "error", err)
			}
			return err
		}
		if err := s.checkMessage(t, p); err != nil {
			return acks.refuse(t.seq, err)
		}
		if t.instance == "" || t.seq == 0 {
			s.Stats.Rejected.Add(1)
			s.Stats.Malformed.Add(1)
			return acks.refuse(t.seq, status.Error(codes.InvalidArgument, "collector: ExportAcked needs agent_instance and seq on every message"))
		}
		if check := s.opts.CheckInstance; check != nil {
			if err := check(ctx, t.instance); err != nil {
				s.Stats.Rejected.Add(1)
				return acks.refuse(t.seq, err)
			}
		}
		e := s.acks.lock(t.instance)
		dup := t.seq <= e.last.Load()
		if dup {
			s.Stats.Duplicates.Add(1)
			s.Stats.DuplicateFlows.Add(uint64(len(t.flows) + len(t.refused)))
			if !loggedDup { // once per stream: an agent resending after a broken stream
				loggedDup = true
				s.log.Info("dropped a message the agent sent again, applied before (duplicate)", "peer", p.Addr,
					"agent_instance", t.instance, "seq", t.seq, "applied_up_to", e.last.Load())
			}
		} else {
			if len(t.flows) > 0 {
				if err := s.handle(ctx, p, t); err != nil {
					e.mu.Unlock()
					if refused, err := refusal(err); refused {
						return acks.refuse(t.seq, err)
					}
					return err
				}
			}
			e.last.Store(t.seq)
			s.acks.record(t.instance, t.seq)
		}
		e.mu.Unlock()
		acks.ack(t.seq, dup)
	}
}

// ackSender sends a stream's acknowledgements from a goroutine of its
// own, the latest seq applied each time it wakes: a message is never held
// back, and when applying is faster than sending (a burst of small
// messages) one ExportAck covers several, so the cost stays below one
// write per message.
type ackSender struct {
	stream grpc.ServerStream
	wake   chan struct{}
	quit   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	seq      uint64 // the latest applied (or duplicate)
	dup      bool
	sent     uint64
	stopping bool
}

func newAckSender(stream grpc.ServerStream) *ackSender {
	a := &ackSender{stream: stream, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

// ack acknowledges every message up to seq (dup: seq's was a duplicate).
func (a *ackSender) ack(seq uint64, dup bool) {
	a.mu.Lock()
	a.seq, a.dup = seq, dup
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *ackSender) run() {
	defer close(a.done)
	var msg flowv1.ExportAck
	for {
		select {
		case <-a.wake:
		case <-a.quit:
		}
		a.mu.Lock()
		seq, dup, stopping := a.seq, a.dup, a.stopping
		a.mu.Unlock()
		if seq != a.sent {
			msg.Seq, msg.Duplicate = seq, dup
			if a.stream.SendMsg(&msg) != nil {
				return
			}
			a.sent = seq
		}
		if stopping {
			return
		}
	}
}

// stop sends what is acknowledged and not yet sent, and returns once the
// goroutine has. Idempotent.
func (a *ackSender) stop() {
	a.mu.Lock()
	if a.stopping {
		a.mu.Unlock()
		<-a.done
		return
	}
	a.stopping = true
	a.mu.Unlock()
	close(a.quit)
	<-a.done
}

// refuse sends what is acknowledged, then tells the agent that the
// message of seq is refused for good (an ExportAck with refused set: it
// drops that message and sends the others again; seq 0, unknown, names
// the first message not acknowledged yet, the one being read), and
// returns err, which ends the stream.
func (a *ackSender) refuse(seq uint64, err error) error {
	a.stop()
	a.stream.SendMsg(&flowv1.ExportAck{Seq: seq, Refused: true})
	return err
}

// Refuse marks a Handler's error as a refusal of its batch for good (a
// flow the handler will never accept: sending it again cannot help). On
// ExportAcked the agent is told which message was refused, drops it and
// sends the others again; any other error ends the stream with the message
// unacknowledged, to be sent again. On Export both end the stream alike.
func Refuse(err error) error { return &refusedError{err} }

type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// refusal splits a Handler's error into whether it refuses its message
// and the error itself.
func refusal(err error) (bool, error) {
	var r *refusedError
	if errors.As(err, &r) {
		return true, r.err
	}
	return false, err
}

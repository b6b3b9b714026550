package receiver_test

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/receiver"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// ExportAcked through the generated client, as a third party's agent
// would call it: each message acknowledged in order, a message sent again
// acknowledged as a duplicate and not handed to the handler, a message
// without its identity refused (a refused ack, then InvalidArgument).
func TestExportAckedGeneratedClient(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := dial(t, rec.Addr)
	open := func() flowv1.FlowCollector_ExportAckedClient {
		st, err := flowv1.NewFlowCollectorClient(conn).ExportAcked(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	roundTrip := func(st flowv1.FlowCollector_ExportAckedClient, seq uint64, n int) *flowv1.ExportAck {
		t.Helper()
		b := flows(n, 53)
		b.AgentInstance, b.Seq = "node-a/0123abcd", seq
		if err := st.Send(b); err != nil {
			t.Fatal(err)
		}
		ack, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	// Acknowledgements are cumulative: one message at a time, each gets
	// its own. A second stream of the instance (the agent after a broken
	// stream) sends 2 again: a duplicate.
	first, second := open(), open()
	for _, tc := range []struct {
		st   flowv1.FlowCollector_ExportAckedClient
		seq  uint64
		n    int
		dup  bool
		want int // flows handled so far
	}{
		{first, 1, 2, false, 2}, {first, 2, 3, false, 5}, {second, 2, 3, true, 5}, {second, 4, 1, false, 6}, {second, 5, 0, false, 6},
	} {
		ack := roundTrip(tc.st, tc.seq, tc.n)
		if ack.Seq != tc.seq || ack.Duplicate != tc.dup || ack.Refused || rec.Count() != tc.want {
			t.Fatalf("seq %d: ack %v, %d flows handled; want seq %d duplicate %v, %d handled", tc.seq, ack, rec.Count(), tc.seq, tc.dup, tc.want)
		}
	}
	if d, f := rec.Server.Stats.Duplicates.Load(), rec.Server.Stats.DuplicateFlows.Load(); d != 1 || f != 3 {
		t.Fatalf("Stats.Duplicates %d (%d flows), want 1 (3)", d, f)
	}
	st := second
	if err := st.Send(flows(1, 53)); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if ack, err := st.Recv(); err != nil || !ack.Refused || ack.Seq != 0 {
		t.Fatalf("a message without identity: %v, %v; want a refused ack of seq 0", ack, err)
	}
	_, err := st.Recv()
	if want := "collector: ExportAcked needs agent_instance and seq on every message"; status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Fatalf("a message without identity: %v, want InvalidArgument %q", err, want)
	}
	// The first stream, closed by its agent, ends with OK.
	if err := first.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != io.EOF {
		t.Fatalf("after CloseSend: %v, want io.EOF (OK)", err)
	}
}

// An agent_instance beyond its bound or with a space is a malformed
// message.
func TestExportAckedInstanceBound(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{})
	for _, inst := range []string{"node a/1", string(make([]byte, 321))} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := flowv1.NewFlowCollectorClient(dial(t, rec.Addr)).ExportAcked(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b := flows(1, 53)
		b.AgentInstance, b.Seq = inst, 1
		st.Send(b)
		if ack, err := st.Recv(); err != nil || !ack.Refused {
			t.Fatalf("instance %q: %v, %v; want a refused ack", inst[:min(len(inst), 10)], ack, err)
		}
		_, err = st.Recv()
		cancel()
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("instance %q: %v, want InvalidArgument", inst[:min(len(inst), 10)], err)
		}
	}
	if rec.Count() != 0 || rec.Server.Stats.Malformed.Load() != 2 {
		t.Fatalf("%d flows handled, %d malformed; want 0 and 2", rec.Count(), rec.Server.Stats.Malformed.Load())
	}
}

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
// without its identity refused with InvalidArgument.
func TestExportAckedGeneratedClient(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := flowv1.NewFlowCollectorClient(dial(t, rec.Addr)).ExportAcked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip := func(seq uint64, n int) *flowv1.ExportAck {
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
	for _, tc := range []struct {
		seq  uint64
		n    int
		dup  bool
		want int // flows handled so far
	}{
		{1, 2, false, 2}, {2, 3, false, 5}, {2, 3, true, 5}, {1, 2, true, 5}, {4, 1, false, 6}, {5, 0, false, 6},
	} {
		ack := roundTrip(tc.seq, tc.n)
		if ack.Seq != tc.seq || ack.Duplicate != tc.dup || rec.Count() != tc.want {
			t.Fatalf("seq %d: ack %v, %d flows handled; want seq %d duplicate %v, %d handled", tc.seq, ack, rec.Count(), tc.seq, tc.dup, tc.want)
		}
	}
	if d, f := rec.Server.Stats.Duplicates.Load(), rec.Server.Stats.DuplicateFlows.Load(); d != 2 || f != 5 {
		t.Fatalf("Stats.Duplicates %d (%d flows), want 2 (5)", d, f)
	}
	if err := st.Send(flows(1, 53)); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if ack, err := st.Recv(); err != nil || !ack.Refused || ack.Seq != 0 {
		t.Fatalf("a message without identity: %v, %v; want a refused ack of seq 0", ack, err)
	}
	_, err = st.Recv()
	if want := "collector: ExportAcked needs agent_instance and seq on every message"; status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Fatalf("a message without identity: %v, want InvalidArgument %q", err, want)
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

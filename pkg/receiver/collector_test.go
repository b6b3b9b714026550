package receiver_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/receiver"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func flows(n int, port uint32) *flowv1.FlowBatch {
	b := &flowv1.FlowBatch{}
	for i := 0; i < n; i++ {
		b.Flows = append(b.Flows, &flowv1.Flow{
			SrcAddr: []byte{10, 0, 0, 1}, DstAddr: []byte{10, 0, 0, 2}, SrcPort: uint32(i % 65536), DstPort: port, Proto: 17,
			Bytes: 100, Packets: 1, StartTime: timestamppb.Now(), EndTime: timestamppb.Now(), Sampling: 1,
			Drops: &flowv1.Drops{DropCause: "padding-padding-padding-padding-padding-padding-padding-padding"},
		})
	}
	return b
}

func open(t *testing.T, conn *grpc.ClientConn) flowv1.FlowCollector_ExportClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, err := flowv1.NewFlowCollectorClient(conn).Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// send sends one batch and, if the server ended the stream, returns its status.
func sendAndFinish(st flowv1.FlowCollector_ExportClient, b *flowv1.FlowBatch) (*flowv1.ExportSummary, error) {
	if err := st.Send(b); err != nil && err != io.EOF {
		return nil, err
	}
	return st.CloseAndRecv()
}

// A healthy agent keeps streaming while another sends an oversized message,
// which gets ResourceExhausted; new agents are still served afterwards.
func TestOversizedMessageRejectedServerKeepsServing(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{MaxMessageBytes: 64 << 10})
	conn := dial(t, rec.Addr)

	good := open(t, conn)
	if err := good.Send(flows(10, 1)); err != nil {
		t.Fatal(err)
	}
	rec.WaitCount(10, 5*time.Second)

	big := flows(2000, 2) // ~250 KiB
	_, err := sendAndFinish(open(t, dial(t, rec.Addr)), big)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized message: got %v, want ResourceExhausted", err)
	}

	if err := good.Send(flows(5, 1)); err != nil {
		t.Fatalf("healthy stream broken by another agent's oversized message: %v", err)
	}
	sum, err := good.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	if sum.Batches != 2 || sum.Flows != 15 {
		t.Fatalf("summary %v, want 2 batches, 15 flows", sum)
	}
	if sum, err := sendAndFinish(open(t, conn), flows(3, 3)); err != nil || sum.Flows != 3 {
		t.Fatalf("new stream after the rejection: %v, %v", sum, err)
	}
	if rec.Count() != 18 {
		t.Fatalf("collector has %d flows, want 18 (none of the oversized message)", rec.Count())
	}
	if got := rec.Server.Stats.Rejected.Load(); got != 1 {
		t.Fatalf("rejected = %d, want 1", got)
	}
}

func sendRaw(t *testing.T, conn *grpc.ClientConn, payload []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return receivertest.ExportRaw(ctx, conn, payload)
}

func TestMalformedAndInvalidMessagesRejected(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{MaxFlowsPerBatch: 100})
	conn := dial(t, rec.Addr)
	for _, tc := range []struct {
		name string
		send func() error
		want codes.Code
	}{
		{"bytes that are not protobuf", func() error { return sendRaw(t, conn, []byte{0xff, 0xff, 0xff, 0xff}) }, codes.InvalidArgument},
		{"truncated protobuf", func() error { return sendRaw(t, conn, []byte{0x0a, 0x50, 0x0a, 0x04}) }, codes.InvalidArgument},
		{"5-byte address", func() error {
			b := flows(2, 1)
			b.Flows[1].SrcAddr = []byte{1, 2, 3, 4, 5}
			_, err := sendAndFinish(open(t, conn), b)
			return err
		}, codes.InvalidArgument},
		{"direction out of range", func() error {
			b := flows(1, 1)
			b.Flows[0].Interfaces = []*flowv1.Interface{{Direction: 7}}
			_, err := sendAndFinish(open(t, conn), b)
			return err
		}, codes.InvalidArgument},
		{"too many flows", func() error {
			_, err := sendAndFinish(open(t, conn), flows(101, 1))
			return err
		}, codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.send()
			if status.Code(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			// Still serving.
			if sum, err := sendAndFinish(open(t, conn), flows(4, 9)); err != nil || sum.Flows != 4 {
				t.Fatalf("valid stream afterwards: %v, %v", sum, err)
			}
		})
	}
	if got := rec.Server.Stats.Rejected.Load(); got != 5 {
		t.Errorf("rejected = %d, want 5", got)
	}
	if got := rec.Server.Stats.Malformed.Load(); got != 4 { // all but "too many flows"
		t.Errorf("Stats.Malformed = %d, want 4", got)
	}
	for _, f := range rec.Flows() {
		if f.DstPort != 9 {
			t.Fatalf("a flow of a rejected message reached the handler: %v", f)
		}
	}
}

func TestMaxStreams(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{MaxStreams: 1})
	conn := dial(t, rec.Addr)
	first := open(t, conn)
	if err := first.Send(flows(1, 1)); err != nil {
		t.Fatal(err)
	}
	rec.WaitCount(1, 5*time.Second)
	if _, err := sendAndFinish(open(t, conn), flows(1, 2)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: got %v, want ResourceExhausted", err)
	}
	if _, err := first.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	// The slot is free again.
	if _, err := sendAndFinish(open(t, conn), flows(1, 3)); err != nil {
		t.Fatalf("after the first stream ended: %v", err)
	}
}

// Shutdown does not wait for agents to close their (endless) streams: it
// ends them with Unavailable, so agents reconnect elsewhere or later.
func TestShutdownEndsOpenStreams(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{})
	st := open(t, dial(t, rec.Addr))
	if err := st.Send(flows(3, 1)); err != nil {
		t.Fatal(err)
	}
	rec.WaitCount(3, 5*time.Second)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rec.Server.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("shutdown took %v with an open stream", d)
	}
	if _, err := st.CloseAndRecv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("agent stream after shutdown: got %v, want Unavailable", err)
	}
	if n := rec.Server.Stats.Streams.Load(); n != 0 {
		t.Fatalf("%d streams still counted open", n)
	}
}

func TestHandlerErrorEndsStream(t *testing.T) {
	srvErr := status.Error(codes.PermissionDenied, "not you")
	calls := 0
	srv, err := receiver.New(func(context.Context, *receiver.Batch) error { calls++; return srvErr }, receiver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lis := listen(t)
	go srv.Serve(lis)
	defer srv.Shutdown(context.Background())
	if _, err := sendAndFinish(open(t, dial(t, lis.Addr().String())), flows(1, 1)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("got %v, want the handler's PermissionDenied", err)
	}
	if calls != 1 || srv.Stats.HandlerErrors.Load() != 1 {
		t.Fatalf("calls=%d handler_errors=%d", calls, srv.Stats.HandlerErrors.Load())
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

package receiver

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// MaxStreamsPerConnection is HTTP/2's MAX_CONCURRENT_STREAMS: a client
// cannot open more calls at once on one connection; the next one waits
// until one ends.
func TestMaxStreamsPerConnection(t *testing.T) {
	srv, err := New(func(context.Context, *Batch) error { return nil }, Options{MaxStreamsPerConnection: 2})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := flowv1.NewFlowCollectorClient(conn)
	open := func(ctx context.Context) (grpc.ClientStreamingClient[flowv1.FlowBatch, flowv1.ExportSummary], error) {
		st, err := c.Export(ctx)
		if err != nil {
			return nil, err
		}
		// A batch through: the server holds the stream (and has sent its
		// settings).
		return st, st.Send(&flowv1.FlowBatch{})
	}
	var streams []grpc.ClientStreamingClient[flowv1.FlowBatch, flowv1.ExportSummary]
	for range 2 {
		st, err := open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	for srv.Stats.Streams.Load() != 2 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := open(ctx); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a third stream on the connection: %v, want to wait (DeadlineExceeded)", err)
	}
	if _, err := streams[0].CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	st, err := open(ctx2)
	if err != nil {
		t.Fatalf("after one ended: %v", err)
	}
	if _, err := st.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
}

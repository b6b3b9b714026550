package receiver_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/receiver"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// A flow with a name longer than Kubernetes or the kernel allows, or more
// interfaces than the datapath records, is refused alone and counted; the
// message's other flows reach the handler and the stream goes on.
func TestFlowsBeyondBoundsRefusedAlone(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{})
	st := open(t, dial(t, rec.Addr))
	b := flows(4, 80)
	b.Flows[1].NodeName = strings.Repeat("n", 254)
	b.Flows[3].Interfaces = make([]*flowv1.Interface, 7)
	for i := range b.Flows[3].Interfaces {
		b.Flows[3].Interfaces[i] = &flowv1.Interface{Name: "eth0"}
	}
	if err := st.Send(b); err != nil {
		t.Fatal(err)
	}
	sum, err := sendAndFinish(st, flows(3, 443))
	if err != nil || sum.GetFlows() != 5 || sum.GetBatches() != 2 {
		t.Fatalf("summary %v, %v; want 5 flows in 2 batches", sum, err)
	}
	ports := map[uint32]int{}
	for _, f := range rec.Flows() {
		ports[f.DstPort]++
	}
	if ports[80] != 2 || ports[443] != 3 {
		t.Errorf("handled flows by port %v, want 2 to 80 and 3 to 443", ports)
	}
	if n := rec.Server.Stats.RefusedBounds.Load(); n != 2 {
		t.Errorf("Stats.RefusedBounds = %d, want 2", n)
	}
	if n := rec.Server.Stats.Malformed.Load(); n != 0 {
		t.Errorf("Stats.Malformed = %d, want 0", n)
	}
}

// emptyFlows is a FlowBatch of n empty flows (2 bytes each).
func emptyFlows(n int) []byte {
	b := make([]byte, 0, 2*n)
	for range n {
		b = protowire.AppendBytes(protowire.AppendTag(b, 1, protowire.BytesType), nil)
	}
	return b
}

// A 4 MiB message of empty flows (the default limit) is refused before
// it is decoded, with the count, a 16 MiB one by gRPC's size check before
// it is read; both within a second.
func TestEmptyFlowsRefusedBeforeDecoding(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{})
	conn := dial(t, rec.Addr, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	for _, tc := range []struct {
		n    int
		want string
	}{
		{receiver.DefaultMaxMessageBytes / 2, "collector: 2097152 flows in one message, max 100000"},
		{8 << 20, "grpc: received message larger than max (16777216 vs. 4194304)"},
	} {
		start := time.Now()
		err := sendRaw(t, conn, emptyFlows(tc.n))
		d := time.Since(start)
		if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != tc.want {
			t.Errorf("%d empty flows: %v, want ResourceExhausted %q", tc.n, err, tc.want)
		}
		if d > time.Second {
			t.Errorf("%d empty flows: answered after %v", tc.n, d)
		}
	}
	if n := rec.Server.Stats.RefusedTooMany.Load(); n != receiver.DefaultMaxMessageBytes/2 {
		t.Errorf("Stats.RefusedTooMany = %d", n)
	}
	if n := rec.Server.Stats.Rejected.Load(); n != 2 {
		t.Errorf("Stats.Rejected = %d, want 2", n)
	}
	if n := rec.Count(); n != 0 {
		t.Errorf("%d flows handled", n)
	}
}

// With a 16 MiB limit (--max-message-bytes 16777216), a message of 16 MiB
// of empty flows is read, counted in the pieces it came in and refused
// within a second: never decoded.
func TestEmptyFlowsAt16MiB(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{MaxMessageBytes: 16 << 20})
	conn := dial(t, rec.Addr, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	start := time.Now()
	err := sendRaw(t, conn, emptyFlows(8<<20))
	if d := time.Since(start); d > time.Second {
		t.Errorf("answered after %v", d)
	}
	if want := "collector: 8388608 flows in one message, max 100000"; status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != want {
		t.Errorf("%v, want ResourceExhausted %q", err, want)
	}
}

// dialFrom connects from local address ip (127.0.0.x: another client).
func dialFrom(t *testing.T, addr, ip string) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// One client cannot take the stream slots of others: past
// MaxStreamsPerClient its streams are refused with ResourceExhausted,
// another client's are served, and a slot freed is taken again.
func TestMaxStreamsPerClient(t *testing.T) {
	rec := receivertest.Start(t, receiver.Options{MaxStreams: 10, MaxStreamsPerClient: 2})
	greedy := dialFrom(t, rec.Addr, "127.0.0.1")
	var held []flowv1.FlowCollector_ExportClient
	for i := range 2 {
		st := open(t, greedy)
		if err := st.Send(flows(1, uint32(i))); err != nil {
			t.Fatal(err)
		}
		held = append(held, st)
	}
	rec.WaitCount(2, 5*time.Second)
	_, err := sendAndFinish(open(t, greedy), flows(1, 9))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "client 127.0.0.1 already has 2 streams open (--max-agents-per-client)") {
		t.Fatalf("third stream of one client: %v, want ResourceExhausted", err)
	}
	if sum, err := sendAndFinish(open(t, dialFrom(t, rec.Addr, "127.0.0.2")), flows(1, 10)); err != nil || sum.GetFlows() != 1 {
		t.Fatalf("another client: %v, %v", sum, err)
	}
	if _, err := held[0].CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	if sum, err := sendAndFinish(open(t, greedy), flows(1, 11)); err != nil || sum.GetFlows() != 1 {
		t.Fatalf("after one of its streams ended: %v, %v", sum, err)
	}
	if n := rec.Server.Stats.StreamsRefusedClient.Load(); n != 1 {
		t.Errorf("Stats.StreamsRefusedClient = %d, want 1", n)
	}
}

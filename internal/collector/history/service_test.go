package history

import (
	"context"
	"errors"
	"fmt"
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
)

// serve runs s on a real receiver.Server on loopback and returns a
// client; small windows so that a client that does not read blocks the
// server's sends early (no BDP growth).
func serve(t *testing.T, s *Service) flowv1.FlowHistoryClient {
	t.Helper()
	conn, err := grpc.NewClient(listen(t, s), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return flowv1.NewFlowHistoryClient(conn)
}

// listen serves s on a real receiver.Server on loopback (all of
// 127.0.0.0/8) and returns its address.
func listen(t *testing.T, s *Service) string {
	t.Helper()
	srv, err := receiver.New(func(context.Context, *receiver.Batch) error { return nil }, receiver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Register(srv)
	lis, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() {
		s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return fmt.Sprintf("127.0.0.1:%d", lis.Addr().(*net.TCPAddr).Port)
}

// recvAll reads a stream to its end: the flows' source ports, and the
// lost flows reported.
func recvAll(t *testing.T, st grpc.ServerStreamingClient[flowv1.GetFlowsResponse], max int) (got []int, lost uint64, err error) {
	t.Helper()
	for len(got) < max {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return got, lost, nil
		}
		if err != nil {
			return got, lost, err
		}
		if r.GetFlow() != nil {
			got = append(got, int(r.GetFlow().Flow.SrcPort))
		}
		lost += r.GetLost()
	}
	return got, lost, nil
}

// waitFiltered waits until every follower's filter has taken what Add
// queued for it.
func waitFiltered(s *Service) {
	for {
		s.mu.Lock()
		pending := 0
		for fl := range s.followers {
			fl.mu.Lock()
			pending += fl.pending
			fl.mu.Unlock()
		}
		s.mu.Unlock()
		if pending == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func get(t *testing.T, c flowv1.FlowHistoryClient, req *flowv1.GetFlowsRequest) []int {
	t.Helper()
	st, err := c.GetFlows(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := recvAll(t, st, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A query returns the matching flows sorted by end time, the last N, within
// since/until.
func TestGetFlowsHistory(t *testing.T) {
	s := NewService(Options{Size: 100})
	c := serve(t, s)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fs := flowsN(1, 6)
	// Received out of time order: 1..6 end at t0+{5,4,3,2,1,0}s.
	for i := range fs {
		fs[i].EndTime = t0.Add(time.Duration(5-i) * time.Second)
		fs[i].StartTime = fs[i].EndTime
		fs[i].Sampling = 1
	}
	fs[2].DstPort = 53
	s.Add(context.Background(), fs)
	for _, tc := range []struct {
		name string
		req  *flowv1.GetFlowsRequest
		want []int
	}{
		{"all", &flowv1.GetFlowsRequest{}, []int{6, 5, 4, 3, 2, 1}},
		{"last 2", &flowv1.GetFlowsRequest{Last: 2}, []int{2, 1}},
		{"since", &flowv1.GetFlowsRequest{Since: timestamppb.New(t0.Add(3 * time.Second))}, []int{3, 2, 1}},
		{"until", &flowv1.GetFlowsRequest{Until: timestamppb.New(t0.Add(time.Second))}, []int{6, 5}},
		{"filter", &flowv1.GetFlowsRequest{Filters: []*flowv1.FlowFilter{{Port: []uint32{53, 1}}}}, []int{3, 1}},
		{"not", &flowv1.GetFlowsRequest{Filters: []*flowv1.FlowFilter{{Not: true, Port: []uint32{53, 1}}}}, []int{6, 5, 4, 2}},
	} {
		if got := get(t, c, tc.req); !equalInts(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}

	// A bad filter is refused, naming the field.
	st, err := c.GetFlows(context.Background(), &flowv1.GetFlowsRequest{Filters: []*flowv1.FlowFilter{{}, {FromIp: []string{"10.0.0.300"}}}})
	if err == nil {
		_, _, err = recvAll(t, st, 1)
	}
	want := `GetFlows: filters[1].from_ip: "10.0.0.300" is not an IP address or CIDR such as 10.0.0.1 or 10.0.0.0/8`
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Errorf("bad filter: %v, want InvalidArgument %q", err, want)
	}
}

// Follow mode: the history, then new flows as they come; a follower that
// does not read loses flows instead of blocking Add, and is told how many;
// Close ends it.
func TestGetFlowsFollow(t *testing.T) {
	s := NewService(Options{Size: 10, FollowBuffer: 16})
	c := serve(t, s)
	s.Add(context.Background(), flowsN(1, 1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := c.GetFlows(ctx, &flowv1.GetFlowsRequest{Follow: true, Filters: []*flowv1.FlowFilter{{Not: true, Port: []uint32{7}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := recvAll(t, st, 1); err != nil || !equalInts(got, []int{1}) {
		t.Fatalf("history: %v %v", got, err)
	}
	for s.Stats.Followers.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	s.Add(context.Background(), flowsN(2, 8)) // 2..9, 7 filtered out
	if got, lost, err := recvAll(t, st, 7); err != nil || !equalInts(got, []int{2, 3, 4, 5, 6, 8, 9}) || lost != 0 {
		t.Fatalf("followed: %v lost %d %v", got, lost, err)
	}
	// A batch comes in the agent's flow map order; followers get it by
	// end time, as the history: 20..23 end at t0+{2,0,3,1}s.
	batch := flowsN(20, 4)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, sec := range []int{2, 0, 3, 1} {
		batch[i].EndTime = t0.Add(time.Duration(sec) * time.Second)
	}
	s.Add(context.Background(), batch)
	if got, lost, err := recvAll(t, st, 4); err != nil || !equalInts(got, []int{21, 23, 20, 22}) || lost != 0 {
		t.Fatalf("followed batch: %v lost %d %v, want [21 23 20 22] by end time", got, lost, err)
	}

	// Not reading: Add never waits; what the follower could not take is
	// counted and reported (its filter runs apart from Add: wait for it).
	const n = 20000
	s.Add(context.Background(), flowsN(10000, n))
	waitFiltered(s)
	if s.Stats.FollowLost.Load() == 0 {
		t.Fatal("nothing lost with a follower that does not read")
	}
	got, lost, err := recvAll(t, st, n-int(s.Stats.FollowLost.Load()))
	if err != nil {
		t.Fatal(err)
	}
	for lost < s.Stats.FollowLost.Load() { // a report after the last flow comes within a second
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		lost += r.GetLost()
	}
	if lost != s.Stats.FollowLost.Load() || uint64(len(got))+lost != n {
		t.Fatalf("received %d + reported lost %d, want %d (lost counted %d)", len(got), lost, n, s.Stats.FollowLost.Load())
	}
	s.Close()
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("after Close: %v, want Unavailable", err)
	}
}

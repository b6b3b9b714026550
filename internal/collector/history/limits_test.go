package history

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// refusal returns the error a call ends with (its first message, if any,
// skipped).
func refusal(t *testing.T, c flowv1.FlowHistoryClient, req *flowv1.GetFlowsRequest) error {
	t.Helper()
	st, err := c.GetFlows(context.Background(), req)
	if err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
}

func wantStatus(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || status.Convert(err).Message() != msg {
		t.Errorf("%s: %v, want %v %q", what, err, code, msg)
	}
}

// Requests are bounded on the wire: size first, then terms, both before
// decoding; the same terms bound holds for a decoded request.
func TestGetFlowsRequestBounds(t *testing.T) {
	s := NewService(Options{Size: 10, MaxFilterTerms: 10, MaxRequestBytes: 1000})
	c := serve(t, s)
	s.Add(context.Background(), flowsN(1, 3))

	// 9 ports and the filter: 10 terms, accepted.
	ok := &flowv1.GetFlowsRequest{Filters: []*flowv1.FlowFilter{{Port: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}}}}
	if got := get(t, c, ok); !equalInts(got, []int{1, 2, 3}) {
		t.Fatalf("10 terms: %v", got)
	}
	// Two filters, 9 values: 11 terms.
	over := &flowv1.GetFlowsRequest{Filters: []*flowv1.FlowFilter{{Port: []uint32{1, 2, 300}}, {FromIp: []string{"10.0.0.1"}, Node: []string{"a", "b", "c", "d", "e"}}}}
	want := "GetFlows: filter of 11 terms, max 10 (--history-max-filter-terms): each filter and each value in one counts one"
	wantStatus(t, "11 terms", refusal(t, c, over), codes.InvalidArgument, want)
	if err := s.checkTerms(countTerms(over)); status.Convert(err).Message() != want {
		t.Errorf("decoded: %v", err)
	}
	b, _ := proto.Marshal(over)
	if n, err := RequestTerms(b); n != 11 || err != nil {
		t.Errorf("RequestTerms: %d %v, want 11", n, err)
	}
	big := &flowv1.GetFlowsRequest{Filters: []*flowv1.FlowFilter{{Port: make([]uint32, 1000)}}}
	wantStatus(t, "1006 bytes", refusal(t, c, big), codes.ResourceExhausted, "GetFlows: request of 1006 bytes, max 1000 (--history-max-request-bytes)")
	if s.Stats.Refusals(RefusedFilterTerms) != 2 || s.Stats.Refusals(RefusedRequestBytes) != 1 {
		t.Errorf("refusals counted: terms %d bytes %d, want 2 (the call, the check above) and 1", s.Stats.Refusals(RefusedFilterTerms), s.Stats.Refusals(RefusedRequestBytes))
	}
	// A broken encoding: InvalidArgument, the service goes on.
	var raw flowv1.GetFlowsRequest
	raw.ProtoReflect().SetUnknown([]byte{0x0a, 0x05, 0x4a}) // filters: length 5, 1 byte
	wantStatus(t, "truncated", refusal(t, c, &raw), codes.InvalidArgument, "GetFlows: malformed request: unexpected EOF")
	if got := get(t, c, ok); len(got) != 3 {
		t.Fatalf("after refusals: %v", got)
	}
}

// Two million ports (about 6 MB, under the message limit agents have):
// refused by size within a second.
func TestGetFlowsTwoMillionPorts(t *testing.T) {
	s := NewService(Options{Size: 10})
	c := serve(t, s)
	ports := make([]uint32, 2_000_000)
	for i := range ports {
		ports[i] = uint32(i % 65536)
	}
	start := time.Now()
	err := refusal(t, c, &flowv1.GetFlowsRequest{Filters: []*flowv1.FlowFilter{{Port: ports}}})
	if status.Code(err) != codes.ResourceExhausted || time.Since(start) > time.Second {
		t.Fatalf("%v after %v, want ResourceExhausted within a second", err, time.Since(start))
	}
	t.Logf("refused in %v: %v", time.Since(start), err)
}

// dialFrom is a client whose connections come from the loopback address
// ip (a client of its own for the per-client bound).
func dialFrom(t *testing.T, target, ip string) flowv1.FlowHistoryClient {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return flowv1.NewFlowHistoryClient(conn)
}

// follow opens a follow stream and waits for its history_end, or returns
// the error it ends with.
func follow(ctx context.Context, c flowv1.FlowHistoryClient) (grpc.ServerStreamingClient[flowv1.GetFlowsResponse], error) {
	st, err := c.GetFlows(ctx, &flowv1.GetFlowsRequest{Follow: true, SkipHistory: true})
	if err != nil {
		return nil, err
	}
	for {
		r, err := st.Recv()
		if err != nil {
			return nil, err
		}
		if r.GetHistoryEnd() {
			return st, nil
		}
	}
}

// Followers are bounded per client address and in all; the slots of a
// follower that leaves are free again.
func TestGetFlowsFollowerBounds(t *testing.T) {
	s := NewService(Options{Size: 10, MaxFollowers: 5, MaxFollowersPerClient: 3})
	target := listen(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := dialFrom(t, target, "127.0.0.2"), dialFrom(t, target, "127.0.0.3")
	for i := range 3 {
		if _, err := follow(ctx, a); err != nil {
			t.Fatalf("a's follower %d: %v", i, err)
		}
	}
	_, err := follow(ctx, a)
	wantStatus(t, "a's 4th", err, codes.ResourceExhausted, "GetFlows: 3 followers from 127.0.0.2 already, max 3 per client (--history-max-followers-per-client)")
	bctx, bcancel := context.WithCancel(ctx)
	for i := range 2 {
		if _, err := follow(bctx, b); err != nil {
			t.Fatalf("b's follower %d: %v", i, err)
		}
	}
	_, err = follow(ctx, b)
	wantStatus(t, "6th", err, codes.ResourceExhausted, "GetFlows: 5 followers already, max 5 (--history-max-followers)")
	// A plain query is no follower.
	if got := get(t, b, &flowv1.GetFlowsRequest{}); len(got) != 0 {
		t.Fatalf("query: %v", got)
	}
	bcancel()
	for s.Stats.Followers.Load() != 3 {
		time.Sleep(time.Millisecond)
	}
	if _, err := follow(ctx, b); err != nil {
		t.Fatalf("after b's left: %v", err)
	}
	if s.Stats.Refusals(RefusedFollowersPerClient) != 1 || s.Stats.Refusals(RefusedFollowers) != 1 {
		t.Errorf("refusals: per client %d, all %d; want 1 and 1", s.Stats.Refusals(RefusedFollowersPerClient), s.Stats.Refusals(RefusedFollowers))
	}
}

// Queries answering at once are bounded: a client that does not read
// holds its slot; the next query is refused, and served once it left.
func TestGetFlowsQueryBound(t *testing.T) {
	s := NewService(Options{Size: 100_000, MaxQueries: 1})
	c := serve(t, s)
	s.Add(context.Background(), flowsN(0, 100_000))
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.GetFlows(ctx, &flowv1.GetFlowsRequest{}) // 100k flows, not read: blocks on flow control
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "2nd query", refusal(t, c, &flowv1.GetFlowsRequest{Last: 1}), codes.ResourceExhausted,
		"GetFlows: 1 queries under way, max 1 (--history-max-queries)")
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := c.GetFlows(context.Background(), &flowv1.GetFlowsRequest{Last: 1})
		if err == nil {
			var got []int
			got, _, err = recvAll(t, st, 10)
			if err == nil {
				if len(got) != 1 {
					t.Fatalf("after the first left: %v", got)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused after the first query left: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slowIPs is a filter of a thousand addresses that none of flowsN's flows
// (10.0.0.1 → 10.0.0.2) has: each flow is checked against every one.
func slowIPs() []string {
	ips := make([]string, 1023)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.1.%d.%d", i/256, i%256)
	}
	return ips
}

// A query filters outside the lock: while one is held where it starts
// filtering, Adds go on, and the query answers from the history as it was
// when it began.
func TestQueryDoesNotStallAdd(t *testing.T) {
	filtering, release := make(chan struct{}), make(chan struct{})
	s := NewService(Options{Size: 100_000, filtering: func() {
		filtering <- struct{}{}
		<-release
	}})
	c := serve(t, s)
	s.Add(context.Background(), flowsN(0, 1000))
	st, err := c.GetFlows(context.Background(), &flowv1.GetFlowsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	<-filtering
	addsReturn(t, s, "a query was held where it filters", flowsN(1000, 1000), flowsN(2000, 1000))
	close(release)
	got, _, err := recvAll(t, st, 1<<30)
	if err != nil || len(got) != 1000 {
		t.Fatalf("the query sent %d flows (%v), want the 1000 held when it began", len(got), err)
	}
}

// addsReturn calls Add with each batch and fails t if they have not all
// returned within a minute: a deadlock detector, not a speed bound (an
// Add takes microseconds).
func addsReturn(t *testing.T, s *Service, while string, batches ...[]enriched.Flow) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, b := range batches {
			s.Add(context.Background(), b)
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("Add blocked while %s", while)
	}
}

// Every repeated field of FlowFilter counts, decoded (flowquery.Terms) and
// on the wire (RequestTerms): a new field cannot slip past the bound.
func TestTermsCoverEveryField(t *testing.T) {
	fields := (&flowv1.FlowFilter{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !fd.IsList() {
			continue
		}
		ff := &flowv1.FlowFilter{}
		l := ff.ProtoReflect().Mutable(fd).List()
		for range 2 {
			if fd.Kind() == protoreflect.StringKind {
				l.Append(protoreflect.ValueOfString("x"))
			} else {
				l.Append(protoreflect.ValueOfUint32(1))
			}
		}
		req := &flowv1.GetFlowsRequest{Filters: []*flowv1.FlowFilter{ff}}
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		wire, err := RequestTerms(b)
		if n := countTerms(req); n != 3 || wire != 3 || err != nil {
			t.Errorf("%s: %d terms decoded, %d on the wire (%v); want 3 and 3", fd.Name(), n, wire, err)
		}
	}
}

// Followers filter in their own goroutines: while every follower is held
// where it starts filtering, Adds only queue the batches for them (all
// 30,000 flows wait, none filtered, none lost), and once let go they
// filter everything.
func TestFollowersDoNotStallAdd(t *testing.T) {
	release := make(chan struct{})
	s := NewService(Options{Size: 100_000, MaxFollowersPerClient: 100, filtering: func() { <-release }})
	c := serve(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const followers = 20
	for range followers {
		st, err := c.GetFlows(ctx, &flowv1.GetFlowsRequest{Follow: true, SkipHistory: true, Filters: []*flowv1.FlowFilter{{ToIp: slowIPs()}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	for s.Stats.Followers.Load() != followers {
		time.Sleep(time.Millisecond)
	}
	addsReturn(t, s, "every follower was held where it filters", flowsN(0, 10_000), flowsN(10_000, 10_000), flowsN(20_000, 10_000))
	s.mu.Lock()
	for fl := range s.followers {
		fl.mu.Lock()
		if fl.pending != 30_000 {
			t.Errorf("a follower has %d flows waiting, want the 30000 Added", fl.pending)
		}
		fl.mu.Unlock()
	}
	s.mu.Unlock()
	close(release)
	waitFiltered(s)
	if s.Stats.FollowLost.Load() != 0 {
		t.Errorf("%d flows lost, none matched", s.Stats.FollowLost.Load())
	}
}

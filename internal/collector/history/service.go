package history

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/flowquery"
)

// Defaults of Options.
const (
	DefaultSize                  = 100_000
	DefaultMaxAge                = time.Hour
	DefaultFollowBuffer          = 4096
	DefaultMaxFollowers          = 1024
	DefaultMaxFollowersPerClient = 64
	DefaultMaxQueries            = 16
	DefaultMaxFilterTerms        = 1024
	DefaultMaxRequestBytes       = 1 << 20
)

// Options configure a Service. Zero values take the defaults.
type Options struct {
	// Size is the most flows the history holds.
	Size int
	// MaxAge is how long a flow stays after it was received.
	MaxAge time.Duration
	// FollowBuffer is the most matching flows queued for sending to one
	// follower (16 times as many may wait for its filter); more are
	// dropped for it (counted, reported to it as lost).
	FollowBuffer int
	// MaxFollowers bounds the follow streams open at once, and
	// MaxFollowersPerClient those of one client (its IP address): more
	// are refused with ResourceExhausted.
	MaxFollowers, MaxFollowersPerClient int
	// MaxQueries bounds the GetFlows calls answering from the history at
	// once (a follower counts until it has sent the history, one with
	// skip_history not at all); more are refused with ResourceExhausted.
	MaxQueries int
	// MaxFilterTerms bounds a request's filter: each FlowFilter and each
	// value in it counts one. More: InvalidArgument, before decoding when
	// the Service is registered with Register.
	MaxFilterTerms int
	// MaxRequestBytes bounds an encoded GetFlowsRequest (with Register):
	// a larger one is refused with ResourceExhausted without decoding it.
	MaxRequestBytes int
	// now is the clock (tests); nil: time.Now.
	now func() time.Time
	// filtering, when set (tests), is called where a query or a follower
	// starts filtering, outside the lock; it may block, so that a test
	// shows that Add never waits for a filter.
	filtering func()
}

// Why a request was refused: the reason label of MetricRefused.
const (
	RefusedRequestBytes       = "request_bytes"
	RefusedFilterTerms        = "filter_terms"
	RefusedFollowers          = "followers"
	RefusedFollowersPerClient = "followers_per_client"
	RefusedQueries            = "queries"
)

var refusedReasons = []string{RefusedRequestBytes, RefusedFilterTerms, RefusedFollowers, RefusedFollowersPerClient, RefusedQueries}

// Stats are cumulative counts, safe to read concurrently.
type Stats struct {
	Followers  atomic.Int64  // follow streams open now
	Queries    atomic.Uint64 // GetFlows calls answered or under way
	FollowLost atomic.Uint64 // flows dropped for followers too slow to take them
	// Refused counts the requests refused by a bound, by reason (the
	// Refused* constants, in refusedReasons' order).
	Refused [5]atomic.Uint64
}

// Refusals returns the requests refused for reason (a Refused* constant).
func (s *Stats) Refusals(reason string) uint64 {
	return s.Refused[slices.Index(refusedReasons, reason)].Load()
}

func (s *Stats) refuse(reason string) { s.Refused[slices.Index(refusedReasons, reason)].Add(1) }

// Service is the FlowHistory gRPC service over a Ring. Add is the
// pipeline's Sink.
type Service struct {
	flowv1.UnimplementedFlowHistoryServer
	Stats Stats

	opts      Options
	mu        sync.Mutex // the ring, the followers and their count per client
	ring      *Ring
	followers map[*follower]struct{}
	byClient  map[string]int
	queries   chan struct{} // MaxQueries tokens
	closed    chan struct{}
	closeOnce sync.Once
}

// follower is one GetFlows call in follow mode. Add queues whole batches
// in its inbox (never waiting); its filter goroutine matches them and
// queues the matching flows in out, which the call's goroutine sends. Both
// queues grow as needed: an idle follower holds next to nothing.
type follower struct {
	query  flowquery.Query
	inTime func(*enriched.Flow) bool
	client string

	mu      sync.Mutex
	inbox   []*batch
	pending int // flows in inbox and being filtered

	wake chan struct{} // capacity 1: something is in the inbox

	omu   sync.Mutex
	out   []*enriched.Flow // out[head:] wait to be sent: at most FollowBuffer
	head  int
	ready chan struct{} // capacity 1: something is in out

	done chan struct{} // the call ended
	lost atomic.Uint64 // dropped since the last report to the client
}

// inboxBatches sizes a follower's inbox: FollowBuffer times this many
// flows may wait for its filter (the batches are mostly the ring's too:
// they cost memory of their own only once the ring has let them go).
const inboxBatches = 16

// matchChunk is how many matching flows the filter queues for sending at
// once.
const matchChunk = 256

// push queues m for sending, as many as there is room for (limit waiting
// at most), and returns how many it dropped.
func (fl *follower) push(m []*enriched.Flow, limit int) int {
	fl.omu.Lock()
	take := min(max(limit-(len(fl.out)-fl.head), 0), len(m))
	fl.out = append(fl.out, m[:take]...)
	fl.omu.Unlock()
	if take > 0 {
		select {
		case fl.ready <- struct{}{}:
		default:
		}
	}
	return len(m) - take
}

// pop takes the next flow to send; nil when none waits.
func (fl *follower) pop() *enriched.Flow {
	fl.omu.Lock()
	defer fl.omu.Unlock()
	if fl.head == len(fl.out) {
		if cap(fl.out) > 4*matchChunk {
			fl.out = nil // a burst is over: let its room go
		}
		fl.out, fl.head = fl.out[:0], 0
		return nil
	}
	f := fl.out[fl.head]
	fl.out[fl.head] = nil
	fl.head++
	if fl.head >= matchChunk && fl.head > len(fl.out)/2 { // compact: out never grows past twice what waits
		n := copy(fl.out, fl.out[fl.head:])
		clear(fl.out[n:])
		fl.out, fl.head = fl.out[:n], 0
	}
	return f
}

// batch is one Add's flows for the followers; order is their indexes by
// end time (nil: not sorted yet).
type batch struct {
	flows []enriched.Flow
	order []int
}

// NewService returns a Service with an empty history.
func NewService(o Options) *Service {
	if o.Size <= 0 {
		o.Size = DefaultSize
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.FollowBuffer <= 0 {
		o.FollowBuffer = DefaultFollowBuffer
	}
	if o.MaxFollowers <= 0 {
		o.MaxFollowers = DefaultMaxFollowers
	}
	if o.MaxFollowersPerClient <= 0 {
		o.MaxFollowersPerClient = DefaultMaxFollowersPerClient
	}
	if o.MaxQueries <= 0 {
		o.MaxQueries = DefaultMaxQueries
	}
	if o.MaxFilterTerms <= 0 {
		o.MaxFilterTerms = DefaultMaxFilterTerms
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.now == nil {
		o.now = time.Now
	}
	return &Service{opts: o, ring: NewRing(o.Size, o.MaxAge), followers: map[*follower]struct{}{}, byClient: map[string]int{},
		queries: make(chan struct{}, o.MaxQueries), closed: make(chan struct{})}
}

// Len is the number of flows in the history.
func (s *Service) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring.Expire(s.opts.now())
	return s.ring.Len()
}

// Add stores flows and queues them for every follower, never waiting for
// one and never filtering under the lock: a follower that has 16 times
// FollowBuffer flows still to filter loses the batch (each of its flows
// counted lost: its filter could not keep up, so which of them matched is
// not known). It is a enrich.Sink; it
// keeps flows, which the pipeline never reuses.
func (s *Service) Add(_ context.Context, flows []enriched.Flow) error {
	if len(flows) == 0 {
		return nil
	}
	now := s.opts.now()
	var b *batch
	if s.Stats.Followers.Load() > 0 {
		b = &batch{flows: flows, order: byEndTime(flows)} // sorted once, outside the lock
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring.Add(flows, now)
	if len(s.followers) == 0 {
		return nil
	}
	if b == nil {
		b = &batch{flows: flows}
	}
	for fl := range s.followers {
		if !fl.queue(b, inboxBatches*s.opts.FollowBuffer) {
			fl.lost.Add(uint64(len(flows)))
			s.Stats.FollowLost.Add(uint64(len(flows)))
		}
	}
	return nil
}

// byEndTime returns the indexes of flows by end time: followers get a
// batch as the history is sent, and an agent's batch comes in its flow
// map's order.
func byEndTime(flows []enriched.Flow) []int {
	order := make([]int, len(flows))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return flows[a].EndTime.Compare(flows[b].EndTime) })
	return order
}

// queue puts b in the inbox unless limit flows are waiting there already
// (an empty inbox takes any batch); false: not queued.
func (fl *follower) queue(b *batch, limit int) bool {
	fl.mu.Lock()
	if fl.pending > 0 && fl.pending+len(b.flows) > limit {
		fl.mu.Unlock()
		return false
	}
	fl.inbox = append(fl.inbox, b)
	fl.pending += len(b.flows)
	fl.mu.Unlock()
	select {
	case fl.wake <- struct{}{}:
	default:
	}
	return true
}

// filter runs for one follower until its call ends: it matches the queued
// batches and queues the matching flows for sending, counting those the
// sender has no room for.
func (s *Service) filter(fl *follower) {
	m := make([]*enriched.Flow, 0, matchChunk)
	for {
		select {
		case <-fl.wake:
		case <-fl.done:
			return
		}
		for {
			fl.mu.Lock()
			if len(fl.inbox) == 0 {
				fl.mu.Unlock()
				break
			}
			b := fl.inbox[0]
			fl.inbox[0] = nil
			fl.inbox = fl.inbox[1:]
			fl.mu.Unlock()
			if s.opts.filtering != nil {
				s.opts.filtering()
			}
			order := b.order
			if order == nil {
				order = byEndTime(b.flows)
			}
			for _, i := range order {
				f := &b.flows[i]
				if !fl.inTime(f) || !fl.query.Match(f) {
					continue
				}
				if m = append(m, f); len(m) == matchChunk {
					s.dropped(fl, fl.push(m, s.opts.FollowBuffer))
					m = m[:0]
				}
			}
			if len(m) > 0 {
				s.dropped(fl, fl.push(m, s.opts.FollowBuffer))
				m = m[:0]
			}
			fl.mu.Lock()
			fl.pending -= len(b.flows)
			fl.mu.Unlock()
		}
	}
}

// dropped counts n flows lost for fl.
func (s *Service) dropped(fl *follower, n int) {
	if n > 0 {
		fl.lost.Add(uint64(n))
		s.Stats.FollowLost.Add(uint64(n))
	}
}

// Close ends every follow stream (with Unavailable) and refuses new ones,
// so that a graceful stop of the gRPC server does not wait for them.
func (s *Service) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
}

var errClosed = status.Error(codes.Unavailable, "collector: shutting down")

// clientKey holds, in a call's context, who its caller is (WithClient).
type clientKey struct{}

// WithClient names the caller a GetFlows call is counted against
// (--history-max-followers-per-client): the user the collector
// authenticated (--auth kubernetes). Every `flowlens observe` through a
// port-forward comes from the collector pod's loopback, so without it they
// would all share one address's followers.
func WithClient(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, clientKey{}, name)
}

// clientOf is who a follower is counted against: the caller WithClient
// named, or else the peer's IP address.
func clientOf(ctx context.Context) string {
	if c, ok := ctx.Value(clientKey{}).(string); ok && c != "" {
		return c
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return p.Addr.String()
}

// GetFlows implements flowv1.FlowHistoryServer.
func (s *Service) GetFlows(req *flowv1.GetFlowsRequest, stream grpc.ServerStreamingServer[flowv1.GetFlowsResponse]) error {
	s.Stats.Queries.Add(1)
	if err := s.checkTerms(countTerms(req)); err != nil {
		return err
	}
	query, err := flowquery.Compile(req.Filters)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "GetFlows: %v", err)
	}
	var since, until time.Time
	if req.Since != nil {
		if err := req.Since.CheckValid(); err != nil {
			return status.Errorf(codes.InvalidArgument, "GetFlows: since: %v", err)
		}
		since = req.Since.AsTime()
	}
	if req.Until != nil {
		if err := req.Until.CheckValid(); err != nil {
			return status.Errorf(codes.InvalidArgument, "GetFlows: until: %v", err)
		}
		until = req.Until.AsTime()
	}
	inTime := func(f *enriched.Flow) bool {
		return (since.IsZero() || !f.EndTime.Before(since)) && (until.IsZero() || !f.EndTime.After(until))
	}
	select {
	case <-s.closed:
		return errClosed
	default:
	}
	// A query holds a slot until it has sent the history; a follower
	// without history needs none.
	release := func() {}
	if !req.Follow || !req.SkipHistory {
		select {
		case s.queries <- struct{}{}:
		default:
			s.Stats.refuse(RefusedQueries)
			return status.Errorf(codes.ResourceExhausted, "GetFlows: %d queries under way, max %d (--history-max-queries)", s.opts.MaxQueries, s.opts.MaxQueries)
		}
		var once sync.Once
		release = func() { once.Do(func() { <-s.queries }) }
		defer release()
	}

	// The history is copied and, in follow mode, the follower registered
	// in one critical section (no flow is missed or sent twice between
	// the two); both are filtered outside it.
	var fl *follower
	ctx := stream.Context()
	s.mu.Lock()
	if req.Follow {
		client := clientOf(ctx)
		if len(s.followers) >= s.opts.MaxFollowers {
			s.mu.Unlock()
			s.Stats.refuse(RefusedFollowers)
			return status.Errorf(codes.ResourceExhausted, "GetFlows: %d followers already, max %d (--history-max-followers)", s.opts.MaxFollowers, s.opts.MaxFollowers)
		}
		if s.byClient[client] >= s.opts.MaxFollowersPerClient {
			s.mu.Unlock()
			s.Stats.refuse(RefusedFollowersPerClient)
			return status.Errorf(codes.ResourceExhausted, "GetFlows: %d followers from %s already, max %d per client (--history-max-followers-per-client)",
				s.opts.MaxFollowersPerClient, client, s.opts.MaxFollowersPerClient)
		}
		fl = &follower{query: query, inTime: inTime, client: client, wake: make(chan struct{}, 1),
			ready: make(chan struct{}, 1), done: make(chan struct{})}
		s.followers[fl] = struct{}{}
		s.byClient[client]++
		s.Stats.Followers.Add(1)
	}
	s.ring.Expire(s.opts.now())
	var snap []*enriched.Flow
	if !req.Follow || !req.SkipHistory {
		snap = s.ring.Snapshot(nil)
	}
	s.mu.Unlock()
	if fl != nil {
		go s.filter(fl)
		defer func() {
			close(fl.done)
			s.mu.Lock()
			delete(s.followers, fl)
			if s.byClient[fl.client]--; s.byClient[fl.client] == 0 {
				delete(s.byClient, fl.client)
			}
			s.mu.Unlock()
			s.Stats.Followers.Add(-1)
		}()
	}

	if s.opts.filtering != nil && len(snap) > 0 {
		s.opts.filtering()
	}
	past := snap[:0] // filtered in place
	for _, f := range snap {
		if inTime(f) && query.Match(f) {
			past = append(past, f)
		}
	}
	clear(snap[len(past):])
	// Oldest first by end time: flows of different agents arrive in
	// eviction order, not in time order.
	slices.SortStableFunc(past, func(a, b *enriched.Flow) int { return a.EndTime.Compare(b.EndTime) })
	if n := req.Last; n > 0 && uint64(len(past)) > n {
		past = past[uint64(len(past))-n:]
	}
	for _, f := range past {
		if err := stream.Send(&flowv1.GetFlowsResponse{Response: &flowv1.GetFlowsResponse_Flow{Flow: enriched.ToProto(f)}}); err != nil {
			return err
		}
	}
	release()
	if fl == nil {
		return nil
	}
	if err := stream.Send(&flowv1.GetFlowsResponse{Response: &flowv1.GetFlowsResponse_HistoryEnd{HistoryEnd: true}}); err != nil {
		return err
	}
	// Losses are reported with the next flow, or at the latest a second
	// later when no flow comes.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if n := fl.lost.Swap(0); n > 0 {
				if err := stream.Send(&flowv1.GetFlowsResponse{Response: &flowv1.GetFlowsResponse_Lost{Lost: n}}); err != nil {
					return err
				}
			}
		case <-fl.ready:
			for f := fl.pop(); f != nil; f = fl.pop() {
				if n := fl.lost.Swap(0); n > 0 {
					if err := stream.Send(&flowv1.GetFlowsResponse{Response: &flowv1.GetFlowsResponse_Lost{Lost: n}}); err != nil {
						return err
					}
				}
				if err := stream.Send(&flowv1.GetFlowsResponse{Response: &flowv1.GetFlowsResponse_Flow{Flow: enriched.ToProto(f)}}); err != nil {
					return err
				}
				select {
				case <-s.closed:
					return errClosed
				default:
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return errClosed
		}
	}
}

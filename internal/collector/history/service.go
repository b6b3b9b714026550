package history

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/flowquery"
)

// Defaults of Options.
const (
	DefaultSize         = 100_000
	DefaultMaxAge       = time.Hour
	DefaultFollowBuffer = 4096
)

// Options configure a Service. Zero values take the defaults.
type Options struct {
	// Size is the most flows the history holds.
	Size int
	// MaxAge is how long a flow stays after it was received.
	MaxAge time.Duration
	// FollowBuffer is the most flows queued for one follower; more are
	// dropped for it (counted, reported to it as lost).
	FollowBuffer int
	// now is the clock (tests); nil: time.Now.
	now func() time.Time
}

// Stats are cumulative counts, safe to read concurrently.
type Stats struct {
	Followers  atomic.Int64  // follow streams open now
	Queries    atomic.Uint64 // GetFlows calls answered or under way
	FollowLost atomic.Uint64 // flows dropped for followers too slow to take them
}

// Service is the FlowHistory gRPC service over a Ring. Add is the
// pipeline's Sink.
type Service struct {
	flowv1.UnimplementedFlowHistoryServer
	Stats Stats

	opts      Options
	mu        sync.Mutex // the ring and the followers
	ring      *Ring
	followers map[*follower]struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

// follower is one GetFlows call in follow mode.
type follower struct {
	query flowquery.Query
	ch    chan *enriched.Flow
	lost  atomic.Uint64 // dropped since the last report to the client
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
	if o.now == nil {
		o.now = time.Now
	}
	return &Service{opts: o, ring: NewRing(o.Size, o.MaxAge), followers: map[*follower]struct{}{}, closed: make(chan struct{})}
}

// Len is the number of flows in the history.
func (s *Service) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring.Expire(s.opts.now())
	return s.ring.Len()
}

// Add stores flows and hands the matching ones to every follower, never
// waiting for one: a follower whose buffer is full loses the flow (counted).
// It is a enrich.Sink; it keeps flows, which the pipeline never reuses.
func (s *Service) Add(_ context.Context, flows []enriched.Flow) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring.Add(flows, s.opts.now())
	if len(s.followers) == 0 {
		return nil
	}
	// Followers get the batch by end time, as the history is sent: an
	// agent's batch comes in its flow map's order.
	order := make([]int, len(flows))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return flows[a].EndTime.Compare(flows[b].EndTime) })
	for fl := range s.followers {
		for _, i := range order {
			f := &flows[i]
			if !fl.query.Match(f) {
				continue
			}
			select {
			case fl.ch <- f:
			default:
				fl.lost.Add(1)
				s.Stats.FollowLost.Add(1)
			}
		}
	}
	return nil
}

// Close ends every follow stream (with Unavailable) and refuses new ones,
// so that a graceful stop of the gRPC server does not wait for them.
func (s *Service) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
}

var errClosed = status.Error(codes.Unavailable, "collector: shutting down")

// GetFlows implements flowv1.FlowHistoryServer.
func (s *Service) GetFlows(req *flowv1.GetFlowsRequest, stream grpc.ServerStreamingServer[flowv1.GetFlowsResponse]) error {
	s.Stats.Queries.Add(1)
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

	// The history and, in follow mode, the registration in one critical
	// section: no flow is missed or sent twice between the two.
	var fl *follower
	var past []*enriched.Flow
	s.mu.Lock()
	s.ring.Expire(s.opts.now())
	s.ring.Each(func(f *enriched.Flow) {
		if inTime(f) && query.Match(f) {
			past = append(past, f)
		}
	})
	if req.Follow {
		fl = &follower{query: query, ch: make(chan *enriched.Flow, s.opts.FollowBuffer)}
		s.followers[fl] = struct{}{}
		s.Stats.Followers.Add(1)
	}
	s.mu.Unlock()
	if fl != nil {
		defer func() {
			s.mu.Lock()
			delete(s.followers, fl)
			s.mu.Unlock()
			s.Stats.Followers.Add(-1)
		}()
	}

	// Oldest first by end time: flows of different agents arrive in
	// eviction order, not in time order.
	slices.SortStableFunc(past, func(a, b *enriched.Flow) int { return a.EndTime.Compare(b.EndTime) })
	if n := req.Last; n > 0 && uint64(len(past)) > n {
		past = past[uint64(len(past))-n:]
	}
	if req.Follow && req.SkipHistory {
		past = nil
	}
	for _, f := range past {
		if err := stream.Send(&flowv1.GetFlowsResponse{Response: &flowv1.GetFlowsResponse_Flow{Flow: enriched.ToProto(f)}}); err != nil {
			return err
		}
	}
	if fl == nil {
		return nil
	}
	if err := stream.Send(&flowv1.GetFlowsResponse{Response: &flowv1.GetFlowsResponse_HistoryEnd{HistoryEnd: true}}); err != nil {
		return err
	}
	ctx := stream.Context()
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
		case f := <-fl.ch:
			if n := fl.lost.Swap(0); n > 0 {
				if err := stream.Send(&flowv1.GetFlowsResponse{Response: &flowv1.GetFlowsResponse_Lost{Lost: n}}); err != nil {
					return err
				}
			}
			if !inTime(f) {
				continue
			}
			if err := stream.Send(&flowv1.GetFlowsResponse{Response: &flowv1.GetFlowsResponse_Flow{Flow: enriched.ToProto(f)}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return errClosed
		}
	}
}

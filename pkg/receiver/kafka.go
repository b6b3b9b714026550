package receiver

// The Kafka side of the collector: a member of a consumer group reading the
// agents' records (pkg/flow/flowkafka) and handing them to the same Handler
// as the gRPC server.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// DefaultKafkaSessionTimeout is ConsumerOptions.SessionTimeout's default.
const DefaultKafkaSessionTimeout = 45 * time.Second

// Where a new consumer group starts (ConsumerOptions.StartOffset).
const (
	// KafkaStartLatest: at the topic's end, with the records produced
	// after it joined. The default: a new group (a renamed one, a
	// collector's first start) does not replay the topic's retention into
	// the counters.
	KafkaStartLatest = "latest"
	// KafkaStartEarliest: at the earliest record the topic keeps.
	KafkaStartEarliest = "earliest"
)

// ConsumerOptions configure a Consumer. Zero values take the defaults.
type ConsumerOptions struct {
	flowkafka.Conn
	Topic string
	// Group is the consumer group (required: it is the consuming program's
	// identity): the members of one group share the topic's partitions, each
	// record handled by one of them.
	Group string
	// SessionTimeout is how long the group waits for a member that stopped
	// heartbeating (killed) before it hands its partitions to the others.
	SessionTimeout time.Duration
	// StartOffset is where a group without a committed offset starts
	// (and one whose committed offset the topic no longer keeps):
	// KafkaStartLatest (the default, also for "") or KafkaStartEarliest.
	StartOffset string
	// MaxFlowsPerBatch bounds the flows in one record (as Options does).
	MaxFlowsPerBatch int
	Logger           *slog.Logger
}

// ConsumerStats are cumulative counts, safe to read concurrently.
type ConsumerStats struct {
	Records   atomic.Uint64 // records handled
	Batches   atomic.Uint64 // batches handed to the Handler (one per record)
	Flows     atomic.Uint64 // flows in those batches
	Bytes     atomic.Uint64 // record value bytes
	Malformed atomic.Uint64 // records skipped: unknown content type, not decoding, invalid flows, too many flows
	// RefusedBounds counts flows refused alone for a string or list beyond
	// its bound (flowpb.Bounds; the record's other flows are handled);
	// RefusedTooMany the flows of records skipped for holding more than
	// MaxFlowsPerBatch.
	RefusedBounds  atomic.Uint64
	RefusedTooMany atomic.Uint64
	HandlerErrors  atomic.Uint64 // records the Handler returned an error for (skipped)
	Commits        atomic.Uint64 // offset commits that succeeded
	CommitErrors   atomic.Uint64 // offset commits that failed for good (their records come again: duplicates)
	// Partitions is how many of the topic's partitions the group gives
	// this member now: 0 before it joins, after it leaves or loses them.
	// The group's members together hold every partition when it consumes.
	Partitions atomic.Int64
}

// Consumer reads flows from a Kafka topic as a member of a consumer group.
//
// Delivery is at-least-once: a polled record's offset is committed only
// after the Handler returned for it (and for every record polled with it),
// and the group does not rebalance between a poll and its commit, so a
// collector that stops or leaves hands its partitions on from the last
// record it handled. A collector killed after handling records and before
// committing them has them handled again by the member that takes its
// partitions over: those are the only duplicates. A new group starts at
// the topic's end (ConsumerOptions.StartOffset).
//
// A record that cannot be handled (not decoding, more flows than
// MaxFlowsPerBatch, an invalid flow, or the Handler failed) is counted,
// logged, skipped and committed with the others: it must not stop its
// partition, nor make every member that picks it up fail in turn. Records
// are measured before they are decoded (flowpb.DecodeBatch), so a hostile
// one cannot exhaust the collector's memory either; a flow beyond a bound
// is refused alone and counted.
type Consumer struct {
	h     Handler
	opts  ConsumerOptions
	log   *slog.Logger
	cl    *kgo.Client
	Stats ConsumerStats

	// held is the partitions of the topic the group gives this member,
	// changed only by franz-go's OnPartitions callbacks, which it runs
	// one at a time.
	held map[int32]bool
}

// NewConsumer prepares a Consumer; Run joins the group.
func NewConsumer(h Handler, opts ConsumerOptions) (*Consumer, error) {
	if h == nil {
		return nil, errors.New("collector: nil handler")
	}
	if opts.Topic == "" {
		return nil, errors.New("collector: no Kafka topic")
	}
	if opts.Group == "" {
		return nil, errors.New("collector: no Kafka consumer group")
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = DefaultKafkaSessionTimeout
	}
	if opts.MaxFlowsPerBatch <= 0 {
		opts.MaxFlowsPerBatch = DefaultMaxFlowsPerBatch
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	start := kgo.NewOffset().AtEnd()
	switch opts.StartOffset {
	case "", KafkaStartLatest:
	case KafkaStartEarliest:
		start = kgo.NewOffset().AtStart()
	default:
		return nil, fmt.Errorf("collector: Kafka start offset %q: must be %s or %s", opts.StartOffset, KafkaStartLatest, KafkaStartEarliest)
	}
	c := &Consumer{h: h, opts: opts, log: opts.Logger.With("topic", opts.Topic, "group", opts.Group), held: map[int32]bool{}}
	base, err := opts.ClientOpts(nil)
	if err != nil {
		return nil, fmt.Errorf("collector: kafka: %w", err)
	}
	c.cl, err = kgo.NewClient(append(base,
		kgo.ConsumerGroup(opts.Group),
		kgo.ConsumeTopics(opts.Topic),
		kgo.ConsumeResetOffset(start),
		// Offsets are committed by Run, after handling.
		kgo.DisableAutoCommit(),
		// No rebalance between a poll and the commit of what it returned:
		// partitions move on from the last handled record.
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(opts.SessionTimeout),
		kgo.HeartbeatInterval(min(3*time.Second, opts.SessionTimeout/3)),
		kgo.ClientID("flowlens-collector"),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { c.hold(m, true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { c.hold(m, false) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { c.hold(m, false) }),
	)...)
	if err != nil {
		return nil, fmt.Errorf("collector: kafka: %w", err)
	}
	return c, nil
}

// hold records that the group gave this member (held) or took from it
// the partitions of the topic in m, and logs the change.
func (c *Consumer) hold(m map[string][]int32, held bool) {
	ps := m[c.opts.Topic]
	if len(ps) == 0 {
		return
	}
	for _, p := range ps {
		if held {
			c.held[p] = true
		} else {
			delete(c.held, p)
		}
	}
	c.Stats.Partitions.Store(int64(len(c.held)))
	c.log.Info("partitions", "assigned", held, "changed", ps, "held", len(c.held))
}

// Run consumes until ctx ends, then commits what it handled, leaves the
// group (its partitions go to the other members at once) and returns nil.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.cl.Close() // leaves the group
	for {
		fs := c.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			// Records polled as ctx ended were not handled: not committed.
			c.cl.AllowRebalance()
			return nil
		}
		fs.EachError(func(topic string, p int32, err error) {
			c.log.Warn("fetch failed (retrying)", "partition", p, "error", err)
		})
		recs := fs.Records()
		for _, r := range recs {
			c.handle(ctx, r)
		}
		if len(recs) > 0 {
			c.commit(recs)
		}
		c.cl.AllowRebalance()
	}
}

// commit commits the offsets past recs, retrying while the brokers are
// unreachable for up to the session timeout (past it the group has moved
// the partitions on anyway). Not cancelled by Run's ctx: what was handled
// is committed even while shutting down. A commit that fails for good is
// counted: its records will be handled again by whoever gets the
// partition next.
func (c *Consumer) commit(recs []*kgo.Record) {
	deadline := time.Now().Add(c.opts.SessionTimeout)
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.cl.CommitRecords(cctx, recs...)
		cancel()
		if err == nil {
			c.Stats.Commits.Add(1)
			return
		}
		if !retriableCommit(err) || time.Now().Add(wait).After(deadline) {
			c.Stats.CommitErrors.Add(1)
			c.log.Warn("offset commit failed: these records will be handled again", "records", len(recs), "error", err)
			return
		}
		c.log.Debug("offset commit failed: retrying", "error", err, "retry_in", wait)
		time.Sleep(wait)
	}
}

// retriableCommit reports whether committing again may succeed: the
// brokers were unreachable or busy, not the group's membership lost.
func retriableCommit(err error) bool {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable
	}
	return !errors.Is(err, kgo.ErrClientClosed)
}

// handle decodes one record and hands its flows to the Handler.
func (c *Consumer) handle(ctx context.Context, r *kgo.Record) {
	c.Stats.Records.Add(1)
	flows, refused, err := c.decode(r)
	if err != nil {
		c.Stats.Malformed.Add(1)
		var tooMany *flowpb.TooManyFlowsError
		if errors.As(err, &tooMany) {
			c.Stats.RefusedTooMany.Add(uint64(tooMany.N))
		}
		c.log.Warn("skipped a malformed record", "partition", r.Partition, "offset", r.Offset, "error", err)
		return
	}
	if len(refused) > 0 {
		c.Stats.RefusedBounds.Add(uint64(len(refused)))
		c.log.Warn("refused flows beyond a bound (counted in refused_flows_total)", "partition", r.Partition, "offset", r.Offset,
			"flows", len(refused), "first", fmt.Sprintf("flows[%d].%v", refused[0].Index, refused[0].Err))
	}
	if len(flows) == 0 {
		return
	}
	if err := c.h(ctx, &Batch{Flows: flows}); err != nil {
		c.Stats.HandlerErrors.Add(1)
		c.log.Warn("handling a record failed: skipped", "partition", r.Partition, "offset", r.Offset, "error", err)
		return
	}
	c.Stats.Batches.Add(1)
	c.Stats.Flows.Add(uint64(len(flows)))
	c.Stats.Bytes.Add(uint64(len(r.Value)))
}

// decode returns a record's validated flows within bounds, whichever kind
// it holds, and those refused for a bound.
func (c *Consumer) decode(r *kgo.Record) ([]*flowv1.Flow, []flowpb.Refused, error) {
	var ct string
	for _, h := range r.Headers {
		if h.Key == flowkafka.HeaderContentType {
			ct = string(h.Value)
		}
	}
	return DecodeRecord(ct, r.Value, c.opts.MaxFlowsPerBatch)
}

// DecodeRecord decodes a Kafka record's value of content type ct (its
// flowkafka.HeaderContentType header) as the Consumer does: a FlowBatch
// through flowpb.DecodeBatch (counted and measured before it is decoded),
// or one Flow through flowpb.DecodeFlow. A flow beyond a bound is left out
// and reported in refused; an error means the record is skipped whole.
func DecodeRecord(ct string, value []byte, maxFlows int) (flows []*flowv1.Flow, refused []flowpb.Refused, err error) {
	switch ct {
	case flowkafka.ContentTypeBatch:
		flows, refused, err = flowpb.DecodeBatch(value, maxFlows)
		if err != nil {
			return nil, nil, fmt.Errorf("FlowBatch: %w", err)
		}
		return flows, refused, nil
	case flowkafka.ContentTypeFlow:
		f, err := flowpb.DecodeFlow(value)
		var be *flowpb.BoundError
		if errors.As(err, &be) {
			return nil, []flowpb.Refused{{Index: 0, Err: be}}, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("Flow: %w", err)
		}
		return []*flowv1.Flow{f}, nil, nil
	}
	return nil, nil, fmt.Errorf("%s header %q: not a flowlens record", flowkafka.HeaderContentType, ct)
}

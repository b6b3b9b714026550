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
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// DefaultKafkaSessionTimeout is ConsumerOptions.SessionTimeout's default.
const DefaultKafkaSessionTimeout = 45 * time.Second

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
	// MaxFlowsPerBatch bounds the flows in one record (as Options does).
	MaxFlowsPerBatch int
	Logger           *slog.Logger
}

// ConsumerStats are cumulative counts, safe to read concurrently.
type ConsumerStats struct {
	Records       atomic.Uint64 // records handled
	Batches       atomic.Uint64 // batches handed to the Handler (one per record)
	Flows         atomic.Uint64 // flows in those batches
	Bytes         atomic.Uint64 // record value bytes
	Malformed     atomic.Uint64 // records skipped: unknown content type, not decoding, invalid flows, too many flows
	HandlerErrors atomic.Uint64 // records the Handler returned an error for (skipped)
	Commits       atomic.Uint64 // offset commits that succeeded
	CommitErrors  atomic.Uint64 // offset commits that failed for good (their records come again: duplicates)
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
// the earliest offset the topic keeps.
//
// A record that cannot be handled (malformed, or the Handler failed) is
// counted, logged and skipped: it must not stop its partition.
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
	c := &Consumer{h: h, opts: opts, log: opts.Logger.With("topic", opts.Topic, "group", opts.Group), held: map[int32]bool{}}
	base, err := opts.ClientOpts(nil)
	if err != nil {
		return nil, fmt.Errorf("collector: kafka: %w", err)
	}
	c.cl, err = kgo.NewClient(append(base,
		kgo.ConsumerGroup(opts.Group),
		kgo.ConsumeTopics(opts.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
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
	flows, err := c.decode(r)
	if err != nil {
		c.Stats.Malformed.Add(1)
		c.log.Warn("skipped a malformed record", "partition", r.Partition, "offset", r.Offset, "error", err)
		return
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

// decode returns a record's validated flows, whichever kind it holds.
func (c *Consumer) decode(r *kgo.Record) ([]*flowv1.Flow, error) {
	var ct string
	for _, h := range r.Headers {
		if h.Key == flowkafka.HeaderContentType {
			ct = string(h.Value)
		}
	}
	var flows []*flowv1.Flow
	switch ct {
	case flowkafka.ContentTypeBatch:
		var b flowv1.FlowBatch
		if err := proto.Unmarshal(r.Value, &b); err != nil {
			return nil, fmt.Errorf("FlowBatch: %w", err)
		}
		flows = b.Flows
	case flowkafka.ContentTypeFlow:
		f := new(flowv1.Flow)
		if err := proto.Unmarshal(r.Value, f); err != nil {
			return nil, fmt.Errorf("Flow: %w", err)
		}
		flows = []*flowv1.Flow{f}
	default:
		return nil, fmt.Errorf("%s header %q: not a flowlens record", flowkafka.HeaderContentType, ct)
	}
	if len(flows) > c.opts.MaxFlowsPerBatch {
		return nil, fmt.Errorf("%d flows in one record, max %d", len(flows), c.opts.MaxFlowsPerBatch)
	}
	for i, f := range flows {
		if err := flowpb.Validate(f); err != nil {
			return nil, fmt.Errorf("flows[%d]: %w", i, err)
		}
	}
	return flows, nil
}

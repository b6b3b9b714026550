// Package kafka exports flows to a Kafka topic (franz-go), as protobuf
// FlowBatch or Flow records (pkg/flow/flowkafka), with optional TLS and
// SASL (PLAIN, SCRAM-SHA-512), compression, linger and acks.
//
// It implements exporter.Exporter and runs behind an exporter.Queue.
// Export returns once the broker acknowledged every record of the batch
// (with acks=none: once they were written), or its context ended, so a
// broker that is down or slow holds Export, and the Queue in front of it
// waits, then drops the oldest batches, counted. franz-go reconnects and
// retries by itself; with acks=all the producer is idempotent, so its
// retries write no duplicates. Every flow handed to Export is counted
// either as acknowledged (Stats.AckedFlows) or as failed (Stats.FailedFlows).
//
// Partitions: every flow goes to flowkafka.PartitionOf its 7-tuple, so one
// flow's records always land in one partition (one collector sees all of
// it) and a node's flows spread over every partition (N collectors share
// the load). In batch mode each Export groups its flows by partition, one
// FlowBatch record (of at most BatchFlows flows) per group.
package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// Defaults of Config.
const (
	DefaultTopic           = "flowlens-flows"
	DefaultMaxBatchBytes   = 1 << 20
	DefaultBatchFlows      = 1000
	DefaultMetadataRefresh = 30 * time.Second
)

// recordOverhead is room left in a produce batch of MaxBatchBytes for the
// batch's and the record's own headers beside one FlowBatch value.
const recordOverhead = 512

// ErrClosed is returned by Export after Close.
var ErrClosed = errors.New("kafka exporter closed")

// Config configures an Exporter. Zero values take the defaults.
type Config struct {
	flowkafka.Conn
	Topic string
	// Compression is "none", "lz4" (default) or "zstd".
	Compression string
	// Linger is how long a partition's records wait for more before they
	// are sent (0: none); an Export waits for its acks, not for its linger.
	Linger time.Duration
	// MaxBatchBytes bounds one produce batch (per partition), so one record.
	MaxBatchBytes int
	// MaxBufferedBytes bounds the bytes of records the client holds, sent
	// or not, until the brokers acknowledge them (0: no bound; the agent
	// derives it from its memory limit, internal/agent/memory.go): with the
	// brokers down, an Export that finds it full waits for room until its
	// deadline, then its records fail, counted in FailedFlows. At least
	// MaxBatchBytes.
	MaxBufferedBytes int
	// Acks is "all" (default), "leader" or "none".
	Acks string
	// Message is "batch" (default: FlowBatch records of up to BatchFlows
	// flows) or "flow" (one Flow per record).
	Message    string
	BatchFlows int
	// NodeName and AgentIP are stamped on every flow. A zero AgentIP is
	// learned from the local address of the connections to the brokers.
	NodeName string
	AgentIP  netip.Addr
	// MetadataRefresh is how often the topic's partition count is re-read.
	MetadataRefresh time.Duration
	Logger          *slog.Logger
}

// Stats are cumulative counts, safe to read concurrently, in the delivery
// statistics every exporter keeps: AckedRecords the brokers acknowledged,
// AckedFlows in them, Bytes their values' bytes (before compression),
// FailedRecords that failed (not retried: the error is final), FailedFlows
// handed to Export and not acknowledged (in failed records, or never
// produced: Export gave up first), Latency each record's time from
// Produce to its acknowledgement.
type Stats = exporter.DeliveryStats

// kafkaCounts are the delivery counts a Kafka exporter learns from the
// brokers' acknowledgements.
const kafkaCounts = exporter.CountAcked | exporter.CountFailed | exporter.CountRecordAcks

// The metrics read the exporter through these (exporter.NewCollector).
var (
	_ exporter.Delivering = (*Exporter)(nil)
)

// Delivery is the exporter's delivery statistics (exporter.Delivering).
func (e *Exporter) Delivery() (*exporter.DeliveryStats, exporter.Counts) {
	return &e.Stats, kafkaCounts
}

// slot is one record of an Export and what its promise learns. The
// record's Context points back to its slot (no allocation per record).
type slot struct {
	context.Context
	rec   kgo.Record
	flows int
	round *round
	err   error // set by the promise
}

// Exporter produces flow records to Kafka. Safe for concurrent use;
// Export calls are serialized.
type Exporter struct {
	cfg    Config
	log    *slog.Logger
	client *kgo.Client
	Stats  Stats

	life       context.Context // cancelled by Close: aborts a blocked Export
	lifeCancel context.CancelFunc
	localIP    atomic.Pointer[netip.Addr]
	headers    []kgo.RecordHeader
	promise    func(*kgo.Record, error)

	mu         sync.Mutex
	round      *round   // the last Export's, reused once all its promises ran
	abandoned  []*round // rounds Export gave up on, their promises still due
	identityIP netip.Addr
	enc        *flowpb.Appender // stamps identityIP (wire form) and the node name
	partitions int              // of the topic; 0 until known
	refreshed  time.Time
	buf        []byte  // the encoded values (reused)
	keys       []byte  // flow mode: the records' keys (reused)
	slots      []*slot // records of the Export in progress (reused)
	part       []int32 // per flow, its partition (reused)
	order      []int32 // flow indexes grouped by partition (reused)
	next       []int32 // per partition, the next index in order (reused)
	starts     []int32 // per partition, its first index in order (reused)
	values     []span  // per record, its value in buf (reused)
	lastLog    time.Time
}

// New checks cfg and prepares the client. It does not wait for the
// brokers: the first Export does.
func New(cfg Config) (*Exporter, error) {
	setDefaults(&cfg)
	e := &Exporter{cfg: cfg, identityIP: cfg.AgentIP, enc: flowpb.NewAppender(cfg.NodeName, flowpb.AddrBytes(cfg.AgentIP))}
	e.log = cfg.Logger.With("exporter", "kafka", "topic", cfg.Topic)
	ct := flowkafka.ContentTypeBatch
	switch cfg.Message {
	case "batch":
	case "flow":
		ct = flowkafka.ContentTypeFlow
	default:
		return nil, fmt.Errorf("kafka exporter: message %q: must be batch or flow", cfg.Message)
	}
	e.headers = []kgo.RecordHeader{{Key: flowkafka.HeaderContentType, Value: []byte(ct)}}
	var dialed func(net.Conn)
	if !cfg.AgentIP.IsValid() {
		dialed = func(c net.Conn) {
			if ta, ok := c.LocalAddr().(*net.TCPAddr); ok {
				ip := ta.AddrPort().Addr().Unmap()
				e.localIP.Store(&ip)
			}
		}
	}
	opts, err := cfg.ClientOpts(dialed)
	if err != nil {
		return nil, fmt.Errorf("kafka exporter: %w", err)
	}
	po, err := producerOpts(cfg)
	if err != nil {
		return nil, fmt.Errorf("kafka exporter: %w", err)
	}
	if e.client, err = kgo.NewClient(append(opts, po...)...); err != nil {
		return nil, fmt.Errorf("kafka exporter: %w", err)
	}
	e.promise = e.acked
	e.life, e.lifeCancel = context.WithCancel(context.Background())
	return e, nil
}

func setDefaults(c *Config) {
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.Compression == "" {
		c.Compression = "lz4"
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.Acks == "" {
		c.Acks = "all"
	}
	if c.Message == "" {
		c.Message = "batch"
	}
	if c.BatchFlows <= 0 {
		c.BatchFlows = DefaultBatchFlows
	}
	if c.MetadataRefresh <= 0 {
		c.MetadataRefresh = DefaultMetadataRefresh
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// producerOpts are the producing options: the partition is the
// exporter's choice (PartitionOf), the rest the flags'.
func producerOpts(c Config) ([]kgo.Opt, error) {
	if c.MaxBatchBytes < 2*recordOverhead {
		return nil, fmt.Errorf("max batch bytes %d: must be at least %d", c.MaxBatchBytes, 2*recordOverhead)
	}
	opts := []kgo.Opt{
		kgo.DefaultProduceTopic(c.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(c.Linger),
		kgo.ProducerBatchMaxBytes(int32(c.MaxBatchBytes)),
		kgo.ClientID("flowlens-agent"),
	}
	if c.MaxBufferedBytes > 0 {
		opts = append(opts, kgo.MaxBufferedBytes(max(c.MaxBufferedBytes, c.MaxBatchBytes)))
	}
	switch c.Compression {
	case "none":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	case "lz4":
		opts = append(opts, kgo.WithCompressor(newLz4Compressor()))
	case "zstd":
		// The fastest level (zstd.SpeedFastest): about 14 % less CPU per
		// flow than the default level in both message kinds, for the same
		// size on make bench's flows (5.7 and 17.6 bytes per flow).
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression().WithLevel(int(zstd.SpeedFastest))))
	default:
		return nil, fmt.Errorf("compression %q: must be none, lz4 or zstd", c.Compression)
	}
	switch c.Acks {
	case "all":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks())) // idempotent: retries write no duplicates
	case "leader":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	case "none":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	default:
		return nil, fmt.Errorf("acks %q: must be all, leader or none", c.Acks)
	}
	return opts, nil
}

// Name implements exporter.Exporter.
func (e *Exporter) Name() string { return "kafka" }

// Export produces the batch's records and returns once every one was
// acknowledged (nil) or failed (an error), or ctx ended or Close was
// called (an error). Every flow is counted once, in Stats.AckedFlows or
// Stats.FailedFlows: those of records still buffered when Export gave up
// are counted when franz-go acks or fails them (at the latest by Close).
func (e *Exporter) Export(ctx context.Context, batch []flow.Record) error {
	if len(batch) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.life.Err() != nil {
		e.Stats.FailedFlows.Add(uint64(len(batch)))
		return ErrClosed
	}
	ctx, release := exporter.Bind(ctx, e.life)
	defer release()

	n, err := e.partitionCount(ctx)
	if err != nil {
		e.Stats.FailedFlows.Add(uint64(len(batch)))
		return e.abortErr(err)
	}
	e.updateIdentity()
	e.abandoned = slices.DeleteFunc(e.abandoned, func(rd *round) bool { return rd.left.Load() == 0 })
	recs := e.encode(batch, n)

	rd := e.round
	if rd == nil {
		rd = &round{done: make(chan struct{}, 1)}
		e.round = rd
	}
	rd.start(len(recs))
	for _, s := range recs {
		s.rec.Timestamp, s.round = rd.produced, rd
		e.client.Produce(ctx, &s.rec, e.promise)
	}
	// Send what lingers now: this Export waits for its acks, and nothing
	// else would join its records.
	_ = e.client.Flush(ctx)
	select {
	case <-rd.done:
	case <-ctx.Done():
		// franz-go still holds the records (it does not drop them for a
		// cancelled context once they are buffered) and will ack or fail
		// them later, counting their flows then: leave it the memory, and
		// the round their promises count in.
		e.slots, e.buf, e.keys, e.round = nil, nil, nil, nil
		e.abandoned = append(e.abandoned, rd)
		return e.abortErr(context.Cause(ctx))
	}
	var failed int
	var firstErr error
	for _, s := range recs {
		if s.err != nil {
			failed += s.flows
			if firstErr == nil {
				firstErr = s.err
			}
		}
	}
	if firstErr != nil {
		e.failedLog(failed, firstErr)
		return e.abortErr(firstErr)
	}
	return nil
}

// round is one Export's records still waiting for their promise, and
// what the promises counted so far. franz-go calls promises serially (its
// documented contract), so the counts are plain fields, added to Stats
// once, by the round's last promise. A round whose promises all ran is
// reused by the next Export (no allocation per Export); one that Export
// gave up on is left to its promises.
type round struct {
	left atomic.Int64
	done chan struct{} // (buffer 1) sent to once, when left reaches 0
	// produced is when the records were produced, with its monotonic
	// reading: franz-go strips it from the records' Timestamp (rounded to
	// the millisecond), and measuring from it costs half the clock reads.
	produced time.Time

	records, flows, bytes, failedRecords, failedFlows uint64
	latency                                           exporter.LatencyCounts
}

// start readies rd for an Export of n records, produced now.
func (rd *round) start(n int) {
	rd.records, rd.flows, rd.bytes, rd.failedRecords, rd.failedFlows = 0, 0, 0, 0, 0
	rd.latency = exporter.LatencyCounts{}
	rd.produced = time.Now()
	rd.left.Store(int64(n))
}

// acked is every record's promise: it runs on franz-go's goroutines, and
// counts the record's flows as acknowledged or failed (in Stats once the
// round's last record is in).
func (e *Exporter) acked(r *kgo.Record, err error) {
	s := r.Context.(*slot)
	rd := s.round
	s.err = err
	if err == nil {
		rd.records++
		rd.flows += uint64(s.flows)
		rd.bytes += uint64(len(r.Value))
		rd.latency.Observe(time.Since(rd.produced))
	} else {
		rd.failedRecords++
		rd.failedFlows += uint64(s.flows)
	}
	if rd.left.Add(-1) == 0 {
		e.Stats.AckedRecords.Add(rd.records)
		e.Stats.AckedFlows.Add(rd.flows)
		e.Stats.Bytes.Add(rd.bytes)
		e.Stats.FailedRecords.Add(rd.failedRecords)
		e.Stats.FailedFlows.Add(rd.failedFlows)
		e.Stats.Latency.Add(&rd.latency)
		rd.done <- struct{}{}
	}
}

// abortErr is what Export returns when it gives up: ErrClosed after Close.
func (e *Exporter) abortErr(err error) error {
	if e.life.Err() != nil {
		return ErrClosed
	}
	return fmt.Errorf("kafka: %w", err)
}

// failedLog logs failed records at most every 30 s.
func (e *Exporter) failedLog(flows int, err error) {
	if time.Since(e.lastLog) > 30*time.Second {
		e.lastLog = time.Now()
		e.log.Warn("flows not acknowledged by the brokers (lost, counted)", "flows", flows,
			"failed_flows_total", e.Stats.FailedFlows.Load(), "error", err)
	}
}

// partitionCount returns the topic's partition count, read again every
// MetadataRefresh. While it was never read it retries until ctx ends (the
// brokers may be down); after that a failed refresh keeps the last count.
func (e *Exporter) partitionCount(ctx context.Context) (int, error) {
	if e.partitions > 0 && time.Since(e.refreshed) < e.cfg.MetadataRefresh {
		return e.partitions, nil
	}
	for {
		n, err := e.readPartitions(ctx)
		if err == nil {
			if n != e.partitions {
				e.log.Info("topic partitions", "partitions", n, "was", e.partitions)
			}
			e.partitions, e.refreshed = n, time.Now()
			return n, nil
		}
		if e.partitions > 0 || errors.Is(err, kerr.UnknownTopicOrPartition) || ctx.Err() != nil {
			if e.partitions > 0 {
				return e.partitions, nil
			}
			return 0, err
		}
		if time.Since(e.lastLog) > 30*time.Second {
			e.lastLog = time.Now()
			e.log.Warn("brokers unreachable: retrying", "error", err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (e *Exporter) readPartitions(ctx context.Context) (int, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(e.cfg.Topic)
	req.Topics = append(req.Topics, t)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, e.client)
	if err != nil {
		return 0, err
	}
	if len(resp.Topics) != 1 {
		return 0, fmt.Errorf("metadata of %d topics, want 1", len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return 0, fmt.Errorf("topic %q: %w", e.cfg.Topic, err)
	}
	if len(resp.Topics[0].Partitions) == 0 {
		return 0, fmt.Errorf("topic %q has no partitions", e.cfg.Topic)
	}
	return len(resp.Topics[0].Partitions), nil
}

// updateIdentity stamps the learned local IP once it is known.
func (e *Exporter) updateIdentity() {
	if e.cfg.AgentIP.IsValid() {
		return
	}
	if p := e.localIP.Load(); p != nil && *p != e.identityIP {
		e.identityIP = *p
		e.enc.SetIdentity(e.cfg.NodeName, flowpb.AddrBytes(*p))
	}
}

// encode writes the batch's records into e.buf and returns their slots.
func (e *Exporter) encode(batch []flow.Record, n int) []*slot {
	e.buf, e.values = e.buf[:0], e.values[:0]
	var recs []*slot
	if e.cfg.Message == "flow" {
		recs = e.encodeFlows(batch, n)
	} else {
		recs = e.encodeBatches(batch, n)
	}
	for i, s := range recs {
		v := e.values[i]
		s.rec.Value = e.buf[v.start:v.end:v.end]
	}
	return recs
}

// span is where a record's value is in Exporter.buf.
type span struct{ start, end int }

// encodeFlows makes one record per flow: the Flow message alone (the
// FlowBatch element flowpb.AppendFlow writes, past its tag and length), its key
// the flow's hash.
func (e *Exporter) encodeFlows(batch []flow.Record, n int) []*slot {
	recs := e.slotsFor(len(batch))
	if cap(e.keys) < 8*len(batch) {
		e.keys = make([]byte, 8*len(batch))
	}
	keys := e.keys[:8*len(batch)]
	for i := range batch {
		r := &batch[i]
		start := len(e.buf)
		e.buf = e.enc.Append(e.buf, r)
		// The value starts past the element's tag and length.
		_, _, tn := protowire.ConsumeTag(e.buf[start:])
		_, ln := protowire.ConsumeVarint(e.buf[start+tn:])
		e.values = append(e.values, span{start + tn + ln, len(e.buf)})
		h := flowkafka.Hash(r)
		k := keys[8*i : 8*i+8 : 8*i+8]
		binary.BigEndian.PutUint64(k, h)
		s := recs[i]
		s.rec.Key, s.rec.Partition, s.flows = k, int32(h%uint64(n)), 1
	}
	return recs
}

// encodeBatches groups the flows by partition (a counting sort, stable:
// each partition's flows keep the batch's order) and writes one FlowBatch
// record per BatchFlows flows (or per MaxBatchBytes) of each partition.
func (e *Exporter) encodeBatches(batch []flow.Record, n int) []*slot {
	part := grow(e.part, len(batch))
	starts := grow(e.starts, n+1)
	clear(starts)
	for i := range batch {
		p := flowkafka.PartitionOf(&batch[i], n)
		part[i] = p
		starts[p+1]++
	}
	for p := 1; p <= n; p++ {
		starts[p] += starts[p-1]
	}
	order := grow(e.order, len(batch))
	next := grow(e.next, n) // per partition, where its next flow goes
	copy(next, starts[:n])
	for i, p := range part {
		order[next[p]] = int32(i)
		next[p]++
	}
	e.part, e.starts, e.order, e.next = part, starts, order, next

	maxMsg := e.cfg.MaxBatchBytes - recordOverhead
	nrec := 0
	for p := 0; p < n; p++ {
		flows, msgStart := 0, len(e.buf)
		for _, i := range order[starts[p]:starts[p+1]] {
			start := len(e.buf)
			e.buf = e.enc.Append(e.buf, &batch[i])
			if flows > 0 && (flows == e.cfg.BatchFlows || len(e.buf)-msgStart > maxMsg) {
				nrec = e.cut(nrec, int32(p), flows, start)
				flows, msgStart = 0, start
			}
			flows++
		}
		if flows > 0 {
			nrec = e.cut(nrec, int32(p), flows, len(e.buf))
		}
	}
	return e.slots[:nrec]
}

// cut ends record nrec (partition p, flows flows) at byte end of e.buf.
func (e *Exporter) cut(nrec int, p int32, flows, end int) int {
	for len(e.slots) <= nrec {
		e.slots = append(e.slots, &slot{Context: context.Background()})
	}
	s := e.slots[nrec]
	s.rec, s.err = kgo.Record{Topic: e.cfg.Topic, Headers: e.headers, Context: s, Partition: p}, nil
	s.flows = flows
	start := 0
	if nrec > 0 {
		start = e.values[nrec-1].end
	}
	e.values = append(e.values, span{start, end})
	return nrec + 1
}

// slotsFor returns n slots ready for new records, reusing those of
// earlier Exports.
func (e *Exporter) slotsFor(n int) []*slot {
	for len(e.slots) < n {
		s := &slot{Context: context.Background()}
		e.slots = append(e.slots, s)
	}
	for _, s := range e.slots[:n] {
		// A record franz-go is done with, made new but for its slot.
		s.rec, s.err = kgo.Record{Topic: e.cfg.Topic, Headers: e.headers, Context: s}, nil
	}
	return e.slots[:n]
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

// CloseTimeout bounds Close: sending what is buffered, closing the
// client and counting what it failed. It is the close grace the agent's
// shutdown gives every exporter (config.ExportCloseGrace) less a second,
// as grpc.CloseTimeout: a Close that took the whole grace (it waited 5 s
// for the buffered records, then up to 5 s for their promises) raced the
// queue's own wait and was left behind with its flows not yet counted.
const CloseTimeout = config.ExportCloseGrace - time.Second

// closeCount is the part of CloseTimeout kept for counting: from closing
// the client to the last promise of what it failed (well under a second
// with a stuck broker: franz-go fails what it holds at once).
const closeCount = time.Second

// Close sends what is buffered (waiting up to CloseTimeout less
// closeCount), aborts an Export still waiting, and closes the client,
// which fails what is left. It returns within CloseTimeout, once every
// flow handed to Export is counted (Stats), the records' promises run:
// franz-go runs those of the records it fails on its own goroutine, after
// its Close returned. Records a stuck broker took and never answered are
// counted failed: in doubt (the broker may still write them once it
// resumes), so a loss is never under-counted.
func (e *Exporter) Close() error {
	e.lifeCancel()
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	flush, cancelFlush := context.WithTimeout(ctx, CloseTimeout-closeCount)
	_ = e.client.Flush(flush)
	cancelFlush()
	e.client.Close()
	e.mu.Lock() // Export returned: its context was cancelled and the client closed
	defer e.mu.Unlock()
	for _, rd := range e.abandoned {
		select {
		case <-rd.done:
		case <-ctx.Done(): // never seen: franz-go fails every record it holds
			e.log.Warn("records' promises still due after Close: their flows not counted", "records", rd.left.Load())
		}
	}
	e.abandoned = nil
	return nil
}

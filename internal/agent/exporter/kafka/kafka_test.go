package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/exporter/kafka"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

const node = "kafka-node-1"

var agentIP = netip.MustParseAddr("192.0.2.7")

// records returns n distinct flows, every field of the first ones set, the
// rest varying in their 7-tuple so they spread over the partitions.
func records(n int) []flow.Record {
	t0 := time.Date(2026, 11, 24, 6, 0, 0, 123456789, time.UTC)
	full := flow.Record{
		SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("10.0.0.2"),
		SrcPort: 40000, DstPort: 443, Proto: 6, Bytes: 1500, Packets: 3,
		TCPFlags: 0x12 | flow.TCPFlagSynAck, EthType: 0x0800, DSCP: 46,
		SrcMAC: [6]byte{2, 0, 0, 0, 0, 0xa}, DstMAC: [6]byte{2, 0, 0, 0, 0, 0xb},
		StartTime: t0, EndTime: t0.Add(1500 * time.Millisecond),
		Interfaces: []flow.Interface{
			{Name: "veth0", Ifindex: 7, Netns: "pod-a", NetnsID: 0xc0ffee, Direction: flow.DirIngress},
			{Name: "eth0", Ifindex: 2, Netns: "host", NetnsID: 1, Direction: flow.DirBoth},
		},
		IfacesOverflow: true, FragUnmatched: true, Sampling: 3, Partial: true,
		DropsFields:       flow.DropsFields{DropPackets: 1, DropBytes: 60, DropCause: "NETFILTER_DROP", DropTCPState: "SYN_SENT", DropTCPFlags: 2},
		RTTFields:         flow.RTTFields{RTT: 1200 * time.Microsecond, RTTMax: 3 * time.Millisecond},
		RetransmitsFields: flow.RetransmitsFields{Retransmits: 4},
		XlatFields:        flow.XlatFields{XlatSrcAddr: netip.MustParseAddr("10.0.0.1"), XlatSrcPort: 40000, XlatDstAddr: netip.MustParseAddr("10.244.1.7"), XlatDstPort: 8443, XlatZoneID: 3},
		TLSFields:         flow.TLSFields{TLSVersion: 0x0304, TLSCipherSuite: 0x1302, TLSGroup: 0x11ec, TLSClientHello: true, QUIC: true},
		DNSFields:         flow.DNSFields{DNSID: 0xbeef, DNSFlags: 0x0100, DNSRcode: 3, DNSName: "kubernetes.default.svc", DNSNameTruncated: true, DNSLatency: 1500 * time.Microsecond, DNSLatencyMax: 4 * time.Millisecond, DNSTimeout: true},
	}
	v6 := flow.Record{
		SrcAddr: netip.MustParseAddr("fd00::1"), DstAddr: netip.MustParseAddr("fd00::2"),
		Proto: 58, IcmpType: 128, IcmpCode: 1, Bytes: 104, Packets: 1, EthType: 0x86dd,
		StartTime: t0, EndTime: t0, Sampling: 1,
	}
	out := []flow.Record{full, v6, {}}
	for i := len(out); i < n; i++ {
		r := full
		r.SrcPort = uint16(1024 + i)
		r.Packets = uint64(i)
		out = append(out, r)
	}
	return out[:n]
}

// expected is what a consumer must decode for r: the gRPC export's Flow.
func expected(r *flow.Record) *flowv1.Flow {
	var f flowv1.Flow
	flowpb.ToProto(&f, r, node, flowpb.AddrBytes(agentIP))
	return &f
}

// consumed reads want records' flows from topic, with each record's
// partition and key.
type got struct {
	flow      *flowv1.Flow
	partition int32
	key       []byte
	flows     int   // flows in its record
	codec     uint8 // its batch's compression (kgo.RecordAttrs)
}

func consume(t *testing.T, addr, topic string, want int) []got {
	t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []got
	for len(out) < want {
		fs := c.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consumed %d of %d flows: %v", len(out), want, err)
		}
		for _, r := range fs.Records() {
			var ct string
			for _, h := range r.Headers {
				if h.Key == flowkafka.HeaderContentType {
					ct = string(h.Value)
				}
			}
			switch ct {
			case flowkafka.ContentTypeBatch:
				var b flowv1.FlowBatch
				if err := proto.Unmarshal(r.Value, &b); err != nil {
					t.Fatal(err)
				}
				for _, f := range b.Flows {
					out = append(out, got{f, r.Partition, r.Key, len(b.Flows), r.Attrs.CompressionType()})
				}
			case flowkafka.ContentTypeFlow:
				var f flowv1.Flow
				if err := proto.Unmarshal(r.Value, &f); err != nil {
					t.Fatal(err)
				}
				out = append(out, got{&f, r.Partition, r.Key, 1, r.Attrs.CompressionType()})
			default:
				t.Fatalf("record with content-type %q", ct)
			}
		}
	}
	// Nothing more: no duplicates.
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if fs := c.PollFetches(short); len(fs.Records()) > 0 {
		t.Fatalf("%d records beyond the %d flows exported", len(fs.Records()), want)
	}
	return out
}

func newExporter(t *testing.T, cfg kafka.Config) *kafka.Exporter {
	t.Helper()
	cfg.NodeName, cfg.AgentIP = node, agentIP
	e, err := kafka.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestRoundTrip exports flows in both message kinds and reads them back
// from a real broker: every field of every flow, exactly once, each in the
// partition of its 7-tuple; batch records hold at most BatchFlows flows;
// flow records are keyed by the flow's hash. The flow kind goes through
// SASL/SCRAM-SHA-512 and zstd, PLAIN, and plaintext with lz4; the batch
// kind through plaintext and lz4, and mTLS. Each record batch is
// compressed as configured (lz4 by default: our compressor, its frames
// without the content checksum, which the broker and franz-go's consumer
// read).
func TestRoundTrip(t *testing.T) {
	b := kafkatest.Start(t)
	pass := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pass, []byte(kafkatest.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  kafka.Config
	}{
		{"batch", kafka.Config{Conn: flowkafka.Conn{Brokers: []string{b.Addr}}, Message: "batch", BatchFlows: 7}},
		{"batch-small-messages", kafka.Config{Conn: flowkafka.Conn{Brokers: []string{b.Addr}}, Message: "batch", MaxBatchBytes: 4096}},
		{"flow-scram-zstd", kafka.Config{Conn: flowkafka.Conn{Brokers: []string{b.SASLAddr},
			SASL: flowkafka.SASLScramSHA512, SASLUser: kafkatest.User, SASLPasswordFile: pass},
			Message: "flow", Compression: "zstd"}},
		{"flow-lz4", kafka.Config{Conn: flowkafka.Conn{Brokers: []string{b.Addr}}, Message: "flow"}},
		{"flow-plain-leader", kafka.Config{Conn: flowkafka.Conn{Brokers: []string{b.SASLAddr},
			SASL: flowkafka.SASLPlain, SASLUser: kafkatest.User, SASLPasswordFile: pass},
			Message: "flow", Acks: "leader", Compression: "none"}},
		{"batch-mtls", kafka.Config{Conn: flowkafka.Conn{Brokers: []string{b.TLSAddr},
			TLSCA: b.PKI.CA, TLSCert: b.PKI.ClientCert, TLSKey: b.PKI.ClientKey}, Message: "batch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := "roundtrip-" + tc.name
			b.CreateTopic(topic, 4)
			tc.cfg.Topic = topic
			e := newExporter(t, tc.cfg)
			recs := records(300)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.Export(ctx, recs[:100]); err != nil {
				t.Fatal(err)
			}
			if err := e.Export(ctx, recs[100:]); err != nil {
				t.Fatal(err)
			}
			if n := e.Stats.AckedFlows.Load(); n != uint64(len(recs)) {
				t.Errorf("Stats.AckedFlows = %d, want %d", n, len(recs))
			}
			if n := e.Stats.FailedFlows.Load(); n != 0 {
				t.Errorf("Stats.FailedFlows = %d", n)
			}
			// One latency per acknowledged record, each under a minute.
			if n, sum, _ := e.Stats.Latency.Snapshot(); n != e.Stats.AckedRecords.Load() || sum <= 0 || sum > float64(n)*60 {
				t.Errorf("Stats.Latency: %d observations summing to %g s, want one per record (%d)", n, sum, e.Stats.AckedRecords.Load())
			}

			want := map[string]*flow.Record{}
			for i := range recs {
				w, _ := proto.MarshalOptions{Deterministic: true}.Marshal(expected(&recs[i]))
				want[string(w)] = &recs[i]
			}
			partitions := map[int32]bool{}
			codecs := map[uint8]int{} // records by their batch's compression
			for _, g := range consume(t, b.Addr, topic, len(recs)) {
				w, _ := proto.MarshalOptions{Deterministic: true}.Marshal(g.flow)
				r, ok := want[string(w)]
				if !ok {
					t.Fatalf("consumed a flow not exported (or twice, or altered): %v", g.flow)
				}
				delete(want, string(w))
				if p := flowkafka.PartitionOf(r, 4); g.partition != p {
					t.Errorf("flow in partition %d, want %d (its 7-tuple's)", g.partition, p)
				}
				partitions[g.partition] = true
				codecs[g.codec]++
				if tc.cfg.Message == "flow" {
					if len(g.key) != 8 || binary.BigEndian.Uint64(g.key) != flowkafka.Hash(r) {
						t.Errorf("flow record key %x, want the flow's hash %x", g.key, flowkafka.Hash(r))
					}
				} else if tc.cfg.BatchFlows > 0 && g.flows > tc.cfg.BatchFlows {
					t.Errorf("a batch record of %d flows, max %d", g.flows, tc.cfg.BatchFlows)
				}
			}
			// Every batch is compressed as configured, except that franz-go
			// sends a batch as is when the codec would not shrink it (a
			// batch of one or two small records, which a busy machine's
			// timing can cut): so batches in the codec or uncompressed, and
			// the codec on some.
			codec := map[string]uint8{"": 3, "none": 0, "zstd": 4}[tc.cfg.Compression]
			if codecs[codec] == 0 || len(codecs) > 2 || (len(codecs) == 2 && codecs[0] == 0) {
				t.Errorf("records by their batch's compression %v, want codec %d (%q), some uncompressed at most", codecs, codec, tc.cfg.Compression)
			}
			if len(partitions) != 4 {
				t.Errorf("flows landed in %d partitions, want all 4", len(partitions))
			}
			if tc.cfg.MaxBatchBytes > 0 && e.Stats.AckedRecords.Load() < 20 {
				t.Errorf("%d records under MaxBatchBytes %d, want the batches split", e.Stats.AckedRecords.Load(), tc.cfg.MaxBatchBytes)
			}
		})
	}
}

// TestMissingTopic: a topic that does not exist fails the export at once,
// every flow counted as failed.
func TestMissingTopic(t *testing.T) {
	b := kafkatest.Start(t)
	e := newExporter(t, kafka.Config{Conn: flowkafka.Conn{Brokers: []string{b.Addr}}, Topic: "no-such-topic"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := e.Export(ctx, records(10))
	if err == nil {
		t.Fatal("Export to a missing topic succeeded")
	}
	t.Logf("error: %v", err)
	if n := e.Stats.FailedFlows.Load(); n != 10 {
		t.Errorf("FailedFlows = %d, want 10", n)
	}
}

// TestBrokerDown: an Export while the broker is down waits; the broker
// comes back and every flow arrives, once. An Export whose context ends
// while the broker is down returns an error; its flows are counted once,
// as acknowledged or as failed, whichever franz-go ends up doing.
func TestBrokerDown(t *testing.T) {
	b := kafkatest.Start(t)
	b.CreateTopic("down", 4)
	e := newExporter(t, kafka.Config{Conn: flowkafka.Conn{Brokers: []string{b.Addr}}, Topic: "down"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recs := records(205)
	if err := e.Export(ctx, recs[:100]); err != nil {
		t.Fatal(err)
	}

	b.Stop()
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	err := e.Export(short, recs[200:])
	cancelShort()
	if err == nil {
		t.Fatal("Export succeeded with the broker down")
	}
	t.Logf("export with the broker down: %v", err)

	done := make(chan error, 1)
	go func() { done <- e.Export(ctx, recs[100:200]) }()
	select {
	case err := <-done:
		t.Fatalf("Export returned with the broker down: %v", err)
	case <-time.After(2 * time.Second):
	}
	b.Restart()
	if err := <-done; err != nil {
		t.Fatalf("Export after the broker came back: %v", err)
	}
	for e.Stats.AckedFlows.Load()+e.Stats.FailedFlows.Load() < 205 {
		if ctx.Err() != nil {
			t.Fatalf("flows acked %d + failed %d, want 205 in all", e.Stats.AckedFlows.Load(), e.Stats.FailedFlows.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	acked := int(e.Stats.AckedFlows.Load())
	if n := acked + int(e.Stats.FailedFlows.Load()); n != 205 {
		t.Fatalf("acked %d + failed %d = %d, want 205", acked, e.Stats.FailedFlows.Load(), n)
	}
	seen := map[string]int{}
	for _, g := range consume(t, b.Addr, "down", acked) {
		seen[fmt.Sprint(g.flow.SrcPort, g.flow.Packets)]++
	}
	for i := range recs {
		n := seen[fmt.Sprint(recs[i].SrcPort, recs[i].Packets)]
		if i < 200 && n != 1 || n > 1 {
			t.Errorf("flow %d consumed %d times", i, n)
		}
	}
}

// TestCloseAbortsExport: Close returns an Export waiting for a broker
// that is down at once with ErrClosed (before Close itself is done: it
// waits for what is buffered, within kafka.CloseTimeout: it returns
// within config.ExportCloseGrace), and every flow is counted once, as
// acknowledged or failed, by the time Close returns.
func TestCloseAbortsExport(t *testing.T) {
	b := kafkatest.Start(t)
	b.CreateTopic("closing", 4)
	e, err := kafka.New(kafka.Config{Conn: flowkafka.Conn{Brokers: []string{b.Addr}}, Topic: "closing",
		NodeName: node, AgentIP: agentIP, Message: "flow"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	recs := records(150)
	if err := e.Export(ctx, recs[:100]); err != nil { // the round reused next
		t.Fatal(err)
	}
	b.Stop()
	exported := make(chan error, 1)
	go func() { exported <- e.Export(ctx, recs[100:]) }()
	select {
	case err := <-exported:
		t.Fatalf("Export returned with the broker down: %v", err)
	case <-time.After(time.Second):
	}
	closed := make(chan struct{})
	start := time.Now()
	go func() { e.Close(); close(closed) }()
	select {
	case err := <-exported:
		if !errors.Is(err, kafka.ErrClosed) {
			t.Errorf("Export after Close: %v, want ErrClosed", err)
		}
	case <-closed:
		t.Fatal("Close returned before the Export it should abort")
	}
	<-closed
	// Within the close grace the agent's shutdown gives it (else the
	// queue leaves it behind, its flows not yet counted).
	took := time.Since(start)
	t.Logf("Close returned after %v", took.Round(time.Millisecond))
	if took > config.ExportCloseGrace {
		t.Errorf("Close took %v, over config.ExportCloseGrace %v", took, config.ExportCloseGrace)
	}
	if n := e.Stats.AckedFlows.Load() + e.Stats.FailedFlows.Load(); n != 150 {
		t.Errorf("acked %d + failed %d = %d, want 150", e.Stats.AckedFlows.Load(), e.Stats.FailedFlows.Load(), n)
	}
	if err := e.Export(ctx, recs[:1]); !errors.Is(err, kafka.ErrClosed) {
		t.Errorf("Export after Close: %v, want ErrClosed", err)
	}
}

// TestBufferBound: with the broker down, the client holds at most
// MaxBufferedBytes of records; an Export that finds the buffer full waits
// until its deadline, then its other records fail, counted. When the
// broker is back every flow is acknowledged or failed, once, and those
// acknowledged after the outage fit in the bound.
func TestBufferBound(t *testing.T) {
	b := kafkatest.Start(t)
	b.CreateTopic("bound", 1)
	const bound = 8 << 10
	e := newExporter(t, kafka.Config{Conn: flowkafka.Conn{Brokers: []string{b.Addr}}, Topic: "bound",
		Message: "flow", MaxBatchBytes: bound, MaxBufferedBytes: bound})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recs := records(1000)
	if err := e.Export(ctx, recs[:10]); err != nil { // the topic's metadata is known
		t.Fatal(err)
	}
	b.Stop()
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	err := e.Export(short, recs[10:])
	cancelShort()
	if err == nil {
		t.Fatal("Export succeeded with the broker down")
	}
	b.Restart()
	for e.Stats.AckedFlows.Load()+e.Stats.FailedFlows.Load() < 1000 {
		if ctx.Err() != nil {
			t.Fatalf("flows acked %d + failed %d, want 1000 in all", e.Stats.AckedFlows.Load(), e.Stats.FailedFlows.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	acked, failed := e.Stats.AckedFlows.Load(), e.Stats.FailedFlows.Load()
	t.Logf("acked %d (10 before the outage), failed %d", acked, failed)
	if acked+failed != 1000 {
		t.Fatalf("acked %d + failed %d = %d, want 1000", acked, failed, acked+failed)
	}
	// A flow record is at least 40 bytes (key and value): the bound holds
	// at most bound/40 of them.
	if held := acked - 10; held > bound/40 || failed == 0 {
		t.Fatalf("%d flows held through the outage, %d failed: the %d-byte bound did not hold", held, failed, bound)
	}
	if got := len(consume(t, b.Addr, "bound", int(acked))); got != int(acked) {
		t.Fatalf("consumed %d flows, want %d", got, acked)
	}
}

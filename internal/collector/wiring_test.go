package collector

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// start runs a collector built from cfg until the test ends (or stop,
// which returns Run's error), printing to out.
func start(t *testing.T, cfg Config) (c *Collector, out *collectortest.SyncBuffer, stop func() error) {
	t.Helper()
	out = &collectortest.SyncBuffer{}
	logs := &collectortest.SyncBuffer{}
	c, err := New(cfg, Options{Stdout: out, Logger: slog.New(slog.NewTextHandler(logs, nil)), InCluster: notInCluster})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("collector log:\n%s", logs.String())
		}
	})
	return c, out, stop
}

// The history is served on the gRPC listener and keeps History.Size
// flows; size 0 serves none.
func TestHistoryOnListen(t *testing.T) {
	cfg := config()
	cfg.History.Size = 2
	c, _, stop := start(t, cfg)
	addr := c.lis.Addr().String()
	recs := collectortest.Records()
	collectortest.Send(t, addr, recs)
	got, err := collectortest.GetFlows(t, addr)
	if err != nil || len(got) != 2 {
		t.Fatalf("history: %d flows, %v; want the last 2", len(got), err)
	}
	// The last two received, sorted by end time (the third ends first).
	for i, h := range got {
		if want := []uint16{recs[2].SrcPort, recs[1].SrcPort}[i]; h.Flow.SrcPort != uint32(want) || h.Flow.NodeName != "node-7" {
			t.Errorf("flow %d: port %d node %q, want %d node-7", i, h.Flow.SrcPort, h.Flow.NodeName, want)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	cfg.History.Size = 0
	c, _, _ = start(t, cfg)
	if _, err := collectortest.GetFlows(t, c.lis.Addr().String()); status.Code(err) != codes.Unimplemented {
		t.Fatalf("history size 0: %v, want Unimplemented", err)
	}
}

// With Kafka brokers the collector prints the flows of the topic's
// records and its metrics count them exactly, the malformed record
// included, and the partition it holds (a real broker).
func TestKafkaConsumerMetrics(t *testing.T) {
	b := kafkatest.Start(t)
	const topic = "collector-metrics"
	b.CreateTopic(topic, 1)
	batch := &flowv1.FlowBatch{}
	for i := range 3 {
		batch.Flows = append(batch.Flows, &flowv1.Flow{SrcAddr: []byte{10, 0, 0, 1}, DstAddr: []byte{10, 0, 0, 2},
			SrcPort: uint32(4000 + i), DstPort: 53, Proto: 17, Bytes: 100, Packets: 1,
			StartTime: timestamppb.Now(), EndTime: timestamppb.Now(), Sampling: 1})
	}
	value, err := proto.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	header := []kgo.RecordHeader{{Key: flowkafka.HeaderContentType, Value: []byte(flowkafka.ContentTypeBatch)}}
	p, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A batch of 3 flows, one of them with a node name longer than
	// Kubernetes allows: refused alone.
	long := proto.Clone(batch).(*flowv1.FlowBatch)
	long.Flows[0].NodeName = strings.Repeat("n", 254)
	longValue, err := proto.Marshal(long)
	if err != nil {
		t.Fatal(err)
	}
	// 100,001 empty flows: one more than --max-flows-per-batch.
	var tooMany []byte
	for range receiver.DefaultMaxFlowsPerBatch + 1 {
		tooMany = append(tooMany, 0x0a, 0x00)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: value, Headers: header},
		&kgo.Record{Topic: topic, Value: []byte{0xff, 0xff}, Headers: header},
		&kgo.Record{Topic: topic, Value: tooMany, Headers: header},
		&kgo.Record{Topic: topic, Value: longValue, Headers: header}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cfg := config()
	cfg.Kafka.Brokers, cfg.Kafka.Topic, cfg.Kafka.Group = []string{b.Addr}, topic, "collector-metrics-group"
	cfg.Kafka.StartOffset = "earliest" // the records were produced before the group existed
	c, out, _ := start(t, cfg)
	var fams promtest.Families
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		fams = promtest.GatherFrom(t, c.metrics.Registry())
		if n, _ := promtest.Value(fams, "flowlens_collector_kafka_records_total"); n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not handle the 4 records; printed:\n%s", strings.Join(out.Lines(), "\n"))
		}
	}
	promtest.Expect(t, fams, 1, MetricRefusedFlows, "reason="+RefusedBounds)
	promtest.Expect(t, fams, receiver.DefaultMaxFlowsPerBatch+1, MetricRefusedFlows, "reason="+RefusedTooManyFlows)
	for name, want := range map[string]float64{
		"flowlens_collector_kafka_records_total":           4,
		"flowlens_collector_kafka_flows_total":             5,
		"flowlens_collector_kafka_record_bytes_total":      float64(len(value) + len(longValue)),
		"flowlens_collector_kafka_malformed_records_total": 2,
		"flowlens_collector_kafka_handler_errors_total":    0,
		"flowlens_collector_kafka_commit_errors_total":     0,
		"flowlens_collector_decode_errors_total":           2,
		// The group's only member holds the topic's one partition.
		"flowlens_collector_kafka_assigned_partitions": 1,
	} {
		promtest.Expect(t, fams, want, name)
	}
	if n := len(out.Lines()); n != 5 {
		t.Errorf("printed %d flows, want 5", n)
	}
}

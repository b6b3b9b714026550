package main

import (
	"context"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
)

// TestKafkaConsumerMetrics: with --kafka-brokers the collector prints the
// flows of the topic's records and its /metrics counts them exactly, the
// malformed record included, and the partition it holds (a real broker).
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
	if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: value, Headers: header},
		&kgo.Record{Topic: topic, Value: []byte{0xff, 0xff}, Headers: header}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	a, out, _ := startFull(t, "--kafka-brokers", b.Addr, "--kafka-topic", topic, "--kafka-group", "collector-metrics-group",
		"--output", "json")
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		fams = scrape(t, a)
		if n, _ := sample(fams, "flowlens_collector_kafka_records_total", ""); n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not handle the 2 records; printed:\n%s", strings.Join(out.lines(), "\n"))
		}
	}
	expectSamples(t, fams, map[[2]string]float64{
		{"flowlens_collector_kafka_records_total", ""}:           2,
		{"flowlens_collector_kafka_flows_total", ""}:             3,
		{"flowlens_collector_kafka_record_bytes_total", ""}:      float64(len(value)),
		{"flowlens_collector_kafka_malformed_records_total", ""}: 1,
		{"flowlens_collector_kafka_handler_errors_total", ""}:    0,
		{"flowlens_collector_kafka_commit_errors_total", ""}:     0,
		{"flowlens_collector_decode_errors_total", ""}:           1,
		// The group's only member holds the topic's one partition.
		{"flowlens_collector_kafka_assigned_partitions", ""}: 1,
	})
	if n := len(out.lines()); n != 3 {
		t.Errorf("printed %d flows, want 3", n)
	}
}

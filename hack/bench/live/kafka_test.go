package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
	"github.com/flowlens/flowlens/internal/agent/exporter/kafka"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
)

// TestKafkaDelivered runs the scale run's Kafka side against a real
// broker: kafkatest started through programTB (outside a test's own TB,
// as the driver does), a topic per message kind, flows produced by the
// agent's exporter, and delivered counting the broker's records and their
// flows, packets and bytes.
func TestKafkaDelivered(t *testing.T) {
	testkit.Need(t, kafkatest.What, kafkaMissing())
	k, err := startKafka()
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	recs := exportertest.Records(2500)
	var packets, bytes uint64
	for _, r := range recs {
		packets += r.Packets
		bytes += r.Bytes
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		export  string
		records func(int64) bool // the broker's record count
	}{
		// One FlowBatch per partition per Export of up to 1000 flows.
		{"kafka-batch", func(n int64) bool { return n >= 3 && n <= 3*kafkaPartitions }},
		{"kafka-flow", func(n int64) bool { return n == int64(len(recs)) }},
	} {
		t.Run(tc.export, func(t *testing.T) {
			topic, err := k.newTopic()
			if err != nil {
				t.Fatal(err)
			}
			e, err := kafka.New(kafka.Config{Conn: flowkafka.Conn{Brokers: []string{k.broker.Addr}}, Topic: topic,
				Message: kafkaMessage(tc.export), NodeName: "node-1", Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for i := 0; i < len(recs); i += 1000 {
				if err := e.Export(ctx, recs[i:min(i+1000, len(recs))]); err != nil {
					t.Fatal(err)
				}
			}
			d, err := k.delivered(topic)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.records(d.Records) || uint64(d.Records) != d.Consumed || d.Malformed != 0 {
				t.Errorf("broker records %d, consumed %d, malformed %d", d.Records, d.Consumed, d.Malformed)
			}
			if d.Flows != len(recs) || d.Packets != packets || d.Bytes != bytes {
				t.Errorf("delivered %d flows, %d packets, %d bytes; want %d, %d, %d", d.Flows, d.Packets, d.Bytes, len(recs), packets, bytes)
			}
		})
	}
}

// TestKafkaMessage is the -scale-exports values' --kafka-message.
func TestKafkaMessage(t *testing.T) {
	for in, want := range map[string]string{"kafka-batch": "batch", "kafka-flow": "flow", "grpc": "", "stdout": "", "kafka": ""} {
		if got := kafkaMessage(in); got != want {
			t.Errorf("kafkaMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

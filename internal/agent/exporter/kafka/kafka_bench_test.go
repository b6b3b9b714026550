package kafka_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
	"github.com/flowlens/flowlens/internal/agent/exporter/kafka"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
)

// BenchmarkEviction is encode + produce + ack of one eviction of 100k flows
// (exportertest.Run: the same flows and figures as the other exporters'
// benchmarks), in the evictor's batches of 1000, to a local broker (topic
// of 4 partitions, acks=all), per message kind and compression (lz4, the
// default, and zstd). Export returns once
// the brokers acked, so there is nothing more to wait for. The broker runs
// in its own process: the CPU and allocations per flow are the exporter's
// (franz-go's included).
func BenchmarkEviction(b *testing.B) {
	br := kafkatest.Start(b)
	for _, msg := range []string{"batch", "flow"} {
		for _, comp := range []string{"lz4", "zstd"} {
			b.Run("message="+msg+"/compression="+comp, func(b *testing.B) {
				e := exporterTo(b, br, fmt.Sprintf("bench-%s-%s-%d", msg, comp, time.Now().UnixNano()), msg, comp)
				exportertest.Run(b, e, nil)
			})
		}
	}
}

// exporterTo is an exporter of message kind msg with compression comp to a
// new topic of 4 partitions on br, lingering 5 ms, closed at tb's end.
func exporterTo(tb testing.TB, br *kafkatest.Broker, topic, msg, comp string) *kafka.Exporter {
	br.CreateTopic(topic, 4)
	e, err := kafka.New(kafka.Config{Conn: flowkafka.Conn{Brokers: []string{br.Addr}}, Topic: topic,
		Message: msg, Compression: comp, Linger: 5 * time.Millisecond, NodeName: "node-1",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

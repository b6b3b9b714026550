package kafka_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/exporter/exportertest"
	"github.com/flowlens/flowlens/internal/exporter/kafka"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
)

// TestNoAllocationsPerFlow: in steady state the exporter allocates nothing
// per flow in either message kind, not even per record in one record per
// flow; what franz-go allocates per produce request and partition batch
// does not grow with the flows (exportertest.MarginalAllocs). Export
// returns once the broker (its own process) acked.
func TestNoAllocationsPerFlow(t *testing.T) {
	br := kafkatest.Start(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, msg := range []string{"batch", "flow"} {
		t.Run("message="+msg, func(t *testing.T) {
			topic := fmt.Sprintf("allocs-%s", msg)
			br.CreateTopic(topic, 4)
			e, err := kafka.New(kafka.Config{Conn: flowkafka.Conn{Brokers: []string{br.Addr}}, Topic: topic,
				Message: msg, Linger: 5 * time.Millisecond, NodeName: "node-1", Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			exportertest.NoAllocsPerFlow(t, e, nil)
		})
	}
}

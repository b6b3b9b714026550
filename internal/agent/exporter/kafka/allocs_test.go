package kafka_test

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
)

// TestNoAllocationsPerFlow: in steady state the exporter allocates nothing
// per flow in either message kind, not even per record in one record per
// flow; what franz-go allocates per produce request and partition batch
// does not grow with the flows (exportertest.MarginalAllocs). Export
// returns once the broker (its own process) acked.
func TestNoAllocationsPerFlow(t *testing.T) {
	br := kafkatest.Start(t)
	for _, msg := range []string{"batch", "flow"} {
		t.Run("message="+msg, func(t *testing.T) {
			exportertest.NoAllocsPerFlow(t, exporterTo(t, br, "allocs-"+msg, msg, "lz4"), nil)
		})
	}
}

package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/pkg/receiver"
)

// Metric names of acknowledged delivery (ExportAcked, docs/metrics.md).
const (
	MetricDuplicateBatches = "flowlens_collector_duplicate_batches_total"
	MetricDuplicateFlows   = "flowlens_collector_duplicate_flows_total"
	MetricAckStateErrors   = "flowlens_collector_ack_state_errors_total"
)

// ackMetrics are the duplicates the gRPC server dropped and its failed
// writes of --ack-state-file.
func ackMetrics(srv *receiver.Stats) []prometheus.Collector {
	counter := func(name, help string, v func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v()) })
	}
	return []prometheus.Collector{
		counter(MetricDuplicateBatches, "Messages an agent sent again (after a broken stream, with no acknowledgement) that the collector had applied already: acknowledged and dropped.", srv.Duplicates.Load),
		counter(MetricDuplicateFlows, "Flows in those messages.", srv.DuplicateFlows.Load),
		counter(MetricAckStateErrors, "Failed writes of --ack-state-file: after a restart, the messages applied meanwhile may be applied again.", srv.AckStateErrors.Load),
	}
}

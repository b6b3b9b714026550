package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/pkg/receiver"
)

// consumerMetrics are the Kafka consumer's counts as Prometheus counters,
// read from its Stats at each scrape (docs/metrics.md).
func consumerMetrics(st *receiver.ConsumerStats) []prometheus.Collector {
	c := func(name, help string, v interface{ Load() uint64 }) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "flowlens_collector_kafka_" + name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		c("records_total", "Kafka records handled (each a FlowBatch or a Flow).", &st.Records),
		c("flows_total", "Flows in the Kafka records handled.", &st.Flows),
		c("record_bytes_total", "Bytes of the Kafka records' values.", &st.Bytes),
		c("malformed_records_total", "Kafka records skipped: unknown content type, not decoding, invalid flows, too many flows (lost; also in decode_errors_total).", &st.Malformed),
		c("handler_errors_total", "Kafka records the pipeline failed to handle (skipped).", &st.HandlerErrors),
		c("commits_total", "Offset commits that succeeded.", &st.Commits),
		c("commit_errors_total", "Offset commits that failed for good: their records come again to the group (duplicates).", &st.CommitErrors),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flowlens_collector_kafka_assigned_partitions",
			Help: "Partitions of the topic the consumer group gives this collector now (the group's members together hold all of them)."},
			func() float64 { return float64(st.Partitions.Load()) }),
	}
}

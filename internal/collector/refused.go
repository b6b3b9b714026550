package collector

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/pkg/receiver"
)

// Metric names of what the receivers refuse (docs/metrics.md).
const (
	MetricRefusedFlows   = "flowlens_collector_refused_flows_total"
	MetricRefusedStreams = "flowlens_collector_refused_streams_total"
)

// The reason label's values of MetricRefusedFlows and MetricRefusedStreams.
const (
	// RefusedBounds: a flow whose string or list is longer than its bound
	// (flowpb.Bounds: names longer than Kubernetes or the kernel allows,
	// more interfaces than the datapath records), refused alone.
	RefusedBounds = "bounds"
	// RefusedTooManyFlows: the flows of a message or record refused whole
	// for holding more than --max-flows-per-batch, counted on the wire.
	RefusedTooManyFlows = "too_many_flows"
	// RefusedIdentity: a flow whose node_name is not the node of the agent
	// that sent it (--auth kubernetes), refused alone.
	RefusedIdentity = "identity"
	// RefusedMaxAgents: a stream refused because --max-agents were open.
	RefusedMaxAgents = "max_agents"
	// RefusedPerClient: a stream refused because its client had
	// --max-agents-per-client open.
	RefusedPerClient = "per_client"
)

// refused is one counter family read from the receivers' Stats at each
// scrape: a series per reason, present (0) from the start.
type refused struct {
	desc    *prometheus.Desc
	reasons []string
	counts  []func() uint64
}

func (r *refused) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r *refused) Collect(ch chan<- prometheus.Metric) {
	for i, reason := range r.reasons {
		ch <- prometheus.MustNewConstMetric(r.desc, prometheus.CounterValue, float64(r.counts[i]()), reason)
	}
}

func (r *refused) add(reason string, count func() uint64) {
	r.reasons, r.counts = append(r.reasons, reason), append(r.counts, count)
}

// refusedMetrics are the flows and streams the gRPC server (srv) and the
// Kafka consumer (cons, nil without Kafka) refused, by reason; identity
// counts the flows --auth kubernetes refused.
func refusedMetrics(srv *receiver.Stats, cons *receiver.ConsumerStats, identity *atomic.Uint64) []prometheus.Collector {
	flows := &refused{desc: prometheus.NewDesc(MetricRefusedFlows,
		"Flows refused by the collector, by reason: bounds (a string or list beyond its bound, refused alone), too_many_flows (in a message or Kafka record of more than --max-flows-per-batch, refused whole), identity (a flow whose node_name is not the node of the agent that sent it, --auth kubernetes).",
		[]string{"reason"}, nil)}
	sum := func(s, c func() uint64) func() uint64 {
		return func() uint64 {
			n := s()
			if cons != nil {
				n += c()
			}
			return n
		}
	}
	flows.add(RefusedBounds, sum(srv.RefusedBounds.Load, func() uint64 { return cons.RefusedBounds.Load() }))
	flows.add(RefusedTooManyFlows, sum(srv.RefusedTooMany.Load, func() uint64 { return cons.RefusedTooMany.Load() }))
	flows.add(RefusedIdentity, identity.Load)
	streams := &refused{desc: prometheus.NewDesc(MetricRefusedStreams,
		"Agent Export streams refused with ResourceExhausted, by reason: max_agents (--max-agents open), per_client (its client had --max-agents-per-client open).",
		[]string{"reason"}, nil)}
	streams.add(RefusedMaxAgents, srv.StreamsRefused.Load)
	streams.add(RefusedPerClient, srv.StreamsRefusedClient.Load)
	return []prometheus.Collector{flows, streams}
}

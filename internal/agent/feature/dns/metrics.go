package dns

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/internal/agent/datapath"
)

// Collectors are the feature's metrics (docs/metrics-agent.md): the
// queries that left the table of pending queries other than by their
// answer, by reason.
func (f *Feature) Collectors(namespace string, m *datapath.Maps) []prometheus.Collector {
	return []prometheus.Collector{&pendingMetrics{f: f, m: m, desc: prometheus.NewDesc(
		prometheus.BuildFQName(namespace, "dns", "pending_evictions_total"),
		"DNS queries that left the table of queries awaiting their answer without an answer, by reason: "+
			"timeout (removed once --dns-timeout expired, and reported as dns_timeout), "+
			"full (not added: the table was full; neither latency nor timeout is reported for it).",
		[]string{"reason"}, nil)}}
}

type pendingMetrics struct {
	f    *Feature
	m    *datapath.Maps
	desc *prometheus.Desc
}

func (p *pendingMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p *pendingMetrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(p.desc, prometheus.CounterValue, float64(p.f.timeouts.Load()), "timeout")
	// Unreadable: left out, like the datapath's metrics.
	if n, err := p.m.ReadDNSPendingFull(); err == nil {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.CounterValue, float64(n), "full")
	}
}

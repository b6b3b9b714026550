package dns

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/internal/agent/datapath"
)

// Collectors are the feature's metrics (docs/metrics-agent.md): the
// queries that left the table of pending queries other than by their
// answer, by reason; with names (--dns-names-cache-size), the answers
// handed on and the address -> name cache.
func (f *Feature) Collectors(namespace string, m *datapath.Maps) []prometheus.Collector {
	cs := []prometheus.Collector{&pendingMetrics{f: f, m: m, desc: prometheus.NewDesc(
		prometheus.BuildFQName(namespace, "dns", "pending_evictions_total"),
		"DNS queries that left the table of queries awaiting their answer without an answer, by reason: "+
			"timeout (removed once --dns-timeout expired, and reported as dns_timeout), "+
			"full (not added: the table was full; neither latency nor timeout is reported for it).",
		[]string{"reason"}, nil)}}
	if f.names != nil {
		cs = append(cs, &namesMetrics{n: f.names, m: m,
			answers: prometheus.NewDesc(prometheus.BuildFQName(namespace, "dns", "answers_total"),
				"DNS answers the TC programs handed to the agent for the names of addresses, by result: "+
					"read (its A and AAAA records named their addresses), unparsed (its header or question could not be read), "+
					"lost (not handed on: the ring of answers was full until the next eviction drained it).",
				[]string{"result"}, nil),
			entries: prometheus.NewDesc(prometheus.BuildFQName(namespace, "dns", "names"),
				"Addresses with a DNS name in the agent's cache (src_dns_name, dst_dns_name), at most --dns-names-cache-size.", nil, nil),
			evictions: prometheus.NewDesc(prometheus.BuildFQName(namespace, "dns", "names_evictions_total"),
				"Addresses whose DNS name was dropped before its TTL ran out because the cache was full (--dns-names-cache-size): the one expiring first goes.", nil, nil),
		})
	}
	return cs
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

type namesMetrics struct {
	n                           *Names
	m                           *datapath.Maps
	answers, entries, evictions *prometheus.Desc
}

func (p *namesMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.answers
	ch <- p.entries
	ch <- p.evictions
}

func (p *namesMetrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(p.answers, prometheus.CounterValue, float64(p.n.named.Load()), "read")
	ch <- prometheus.MustNewConstMetric(p.answers, prometheus.CounterValue, float64(p.n.unparsed.Load()), "unparsed")
	if n, err := p.m.ReadDNSAnswersLost(); err == nil {
		ch <- prometheus.MustNewConstMetric(p.answers, prometheus.CounterValue, float64(n), "lost")
	}
	ch <- prometheus.MustNewConstMetric(p.entries, prometheus.GaugeValue, float64(p.n.Len()))
	ch <- prometheus.MustNewConstMetric(p.evictions, prometheus.CounterValue, float64(p.n.evictions.Load()))
}

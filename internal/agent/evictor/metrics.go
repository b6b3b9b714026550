package evictor

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is the evictor's Prometheus metrics: its Stats, read at scrape
// time, and the duration of each eviction, which it observes as the
// evictor's Observer (Config.Observer).
type Metrics struct {
	stats    *Stats
	duration *prometheus.HistogramVec

	evictions, evictedFlows, readFailures, lostPackets *prometheus.Desc
}

// NewMetrics is the metrics over s, named <namespace>_evict*
// (docs/metrics-agent.md).
func NewMetrics(namespace string, s *Stats) *Metrics {
	m := &Metrics{
		stats: s,
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "eviction_duration_seconds",
			Help:      "Duration of evictions (flip the flow maps, wait for readers, read and convert the flows, hand them to the exporters), by reason.",
			Buckets:   []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"reason"}),
		evictions: prometheus.NewDesc(namespace+"_evictions_total",
			"Evictions of the in-kernel flow map, by reason: timer (every --cache-active-timeout), pressure (map filling up), shutdown.", []string{"reason"}, nil),
		evictedFlows: prometheus.NewDesc(namespace+"_evicted_flows_total",
			"Flow records produced by evictions, by source: map (the flow map), overflow (aggregated from overflow ring buffer records), partial (enrichment entries with no flow entry).", []string{"source"}, nil),
		readFailures: prometheus.NewDesc(namespace+"_eviction_read_failures_total",
			"Evictions whose read of the ended generation failed after the flip: the generation was kept, not discarded, and the next eviction read the rest of it before flipping again.", nil, nil),
		lostPackets: prometheus.NewDesc(namespace+"_lost_packets_total",
			"Packets the kernel handed to the agent and the agent could not account for because one of its memory bounds was reached, by reason: overflow_aggregation_full (the overflow ring buffer's aggregation held its maximum of flows).", []string{"reason"}, nil),
	}
	for _, r := range reasons {
		m.duration.WithLabelValues(r) // exist at 0 from the start
	}
	return m
}

// reasons are the eviction reasons, in Stats.Evictions' order.
var reasons = [3]string{ReasonTimer, ReasonPressure, ReasonShutdown}

// ObserveEviction records one eviction's duration: *Metrics is an Observer.
func (m *Metrics) ObserveEviction(reason string, _ int, d time.Duration) {
	m.duration.WithLabelValues(reason).Observe(d.Seconds())
}

// Collectors are the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.duration, statsCollector{m}}
}

// statsCollector reads Stats at scrape time.
type statsCollector struct{ m *Metrics }

func (c statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.evictions
	ch <- c.m.evictedFlows
	ch <- c.m.readFailures
	ch <- c.m.lostPackets
}

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	m, s := c.m, c.m.stats
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for i, r := range reasons {
		counter(m.evictions, s.Evictions[i].Load(), r)
	}
	counter(m.evictedFlows, s.Flows.Load(), "map")
	counter(m.evictedFlows, s.OverflowFlows.Load(), "overflow")
	counter(m.evictedFlows, s.PartialFlows.Load(), "partial")
	counter(m.readFailures, s.ReadFailures.Load())
	for i, r := range LostReasons {
		counter(m.lostPackets, s.LostPackets[i].Load(), r)
	}
}

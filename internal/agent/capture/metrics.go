package capture

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/internal/agent/metrics"
)

// The capture's metrics (docs/metrics-agent.md, Packet capture), read from
// the Capturer's totals when Prometheus scrapes: register the Capturer in
// the agent's registry (it is a prometheus.Collector).
var (
	descRunning = prometheus.NewDesc(metrics.Namespace+"_captures_running",
		"Packet captures running on this agent.", nil, nil)
	descPackets = prometheus.NewDesc(metrics.Namespace+"_capture_packets_total",
		"Packets captured and handed to the capture's consumer.", nil, nil)
	descBytes = prometheus.NewDesc(metrics.Namespace+"_capture_bytes_total",
		"Bytes of the captured packets handed over (up to the snaplen each).", nil, nil)
	descLost = prometheus.NewDesc(metrics.Namespace+"_capture_lost_packets_total",
		"Packets that matched a capture's filter but were not captured, by reason: ring_full, consumer.",
		[]string{"reason"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Capturer) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRunning
	ch <- descPackets
	ch <- descBytes
	ch <- descLost
}

// Collect implements prometheus.Collector.
func (c *Capturer) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(c.running.Load()))
	ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(c.packets.Load()))
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(c.bytes.Load()))
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(c.ringFull.Load()), LostRingFull)
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(c.cons.Load()), LostConsumer)
}

// Running is how many captures run now (flowlens_agent_captures_running).
func (c *Capturer) Running() int { return int(c.running.Load()) }

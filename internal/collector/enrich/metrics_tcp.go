package enrich

import (
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// The metrics of feature tcp: TCP connection health by workload pair
// (docs/tcp.md). Each counts what a flow's source did: its connects (the
// source is the client), the resets and zero windows it sent.
const (
	MetricTCPConnects    = Prefix + "tcp_connects_total"
	MetricTCPResets      = Prefix + "tcp_resets_total"
	MetricTCPZeroWindows = Prefix + "tcp_zero_windows_total"
	MetricTCPHandshake   = Prefix + "tcp_handshake_seconds"

	// Values of tcp_connects_total's result label.
	TCPResultEstablished = "established"
	TCPResultRefused     = "refused"
	TCPResultTimeout     = "timeout"
)

var tcpMetricNames = []string{MetricTCPConnects, MetricTCPResets, MetricTCPZeroWindows, MetricTCPHandshake}

// TCPHandshakeBuckets are the buckets of flowlens_collector_tcp_handshake_seconds:
// 100 µs to 3 s. Fewer than RTTBuckets (the series are per workload pair);
// 1 s and 3 s catch the handshakes that needed one or two SYN
// retransmissions (the kernel's initial RTO is 1 s, then doubles).
var TCPHandshakeBuckets = []float64{
	100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3, 250e-3,
	1, 3,
}

type tcpMetrics struct {
	connects, resets, zeroWindows *counterSeries
	handshake                     *histogramSeries
}

func (m *tcpMetrics) register(r registrar) {
	labels := []string{"src_namespace", "src_workload", "dst_namespace", "dst_workload"}
	m.connects = r.counterVec(MetricTCPConnects, "TCP connection attempts (feature tcp; the first SYN of each connection, counted on the client's flow; not scaled), by source (the client) and destination namespace and workload and result: refused (answered by a RST), timeout (abandoned without an answer), established (the others: tcp_connects - tcp_refused - tcp_timeouts of each flow record).",
		append(labels[:4:4], "result"))
	m.resets = r.counterVec(MetricTCPResets, "TCP RST segments sent (feature tcp; in any state; not scaled), by the sender's (the flow's source) and the destination's namespace and workload.", labels)
	m.zeroWindows = r.counterVec(MetricTCPZeroWindows, "TCP segments advertising a zero receive window (feature tcp: the sender could not keep up with reading; not scaled), by the sender's (the flow's source) and the destination's namespace and workload.", labels)
	m.handshake = r.histogramVec(MetricTCPHandshake, "TCP SYN to SYN-ACK latency of the client's connects (feature tcp), observed once per flow record that reports one (the last of the eviction period), by source (the client) and destination namespace and workload.",
		TCPHandshakeBuckets, labels)
}

// observe: the agent's TCP hooks see every SYN, RST and zero-window
// segment whatever the sampling rate: exact counts, not scaled.
func (m *tcpMetrics) observe(f *enriched.Flow, l *flowLabels) {
	if !f.HasTCP() {
		return
	}
	if m.connects != nil {
		if n := f.TCPEstablished(); n > 0 {
			m.connects.add(l.now, float64(n), l.srcNS, l.srcW, l.dstNS, l.dstW, TCPResultEstablished)
		}
		if f.TCPRefused > 0 {
			m.connects.add(l.now, float64(f.TCPRefused), l.srcNS, l.srcW, l.dstNS, l.dstW, TCPResultRefused)
		}
		if f.TCPTimeouts > 0 {
			m.connects.add(l.now, float64(f.TCPTimeouts), l.srcNS, l.srcW, l.dstNS, l.dstW, TCPResultTimeout)
		}
	}
	if m.resets != nil && f.TCPResets > 0 {
		m.resets.add(l.now, float64(f.TCPResets), l.srcNS, l.srcW, l.dstNS, l.dstW)
	}
	if m.zeroWindows != nil && f.TCPZeroWindows > 0 {
		m.zeroWindows.add(l.now, float64(f.TCPZeroWindows), l.srcNS, l.srcW, l.dstNS, l.dstW)
	}
	if m.handshake != nil && f.TCPHandshake > 0 {
		m.handshake.observe(l.now, f.TCPHandshake.Seconds(), l.srcNS, l.srcW, l.dstNS, l.dstW)
	}
}

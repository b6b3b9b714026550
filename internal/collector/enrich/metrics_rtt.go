package enrich

import (
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// The metric of feature rtt: the smoothed TCP round-trip time.
const MetricRTT = Prefix + "rtt_seconds"

var rttMetricNames = []string{MetricRTT}

// RTTBuckets are the buckets of flowlens_collector_rtt_seconds: 50 µs to
// 10 s, 1-2.5-5 per decade.
var RTTBuckets = []float64{
	50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
	1, 2.5, 5, 10,
}

type rttMetrics struct{ rtt *histogramSeries }

func (m *rttMetrics) register(r registrar) {
	m.rtt = r.histogramVec(MetricRTT, "Smoothed TCP round-trip time, observed once per flow that reports one (its latest value in the eviction period), by source and destination namespace.",
		RTTBuckets, []string{"src_namespace", "dst_namespace"})
}

func (m *rttMetrics) observe(f *enriched.Flow, l *flowLabels) {
	if f.RTT > 0 && m.rtt != nil {
		m.rtt.observe(l.now, f.RTT.Seconds(), l.srcNS, l.dstNS)
	}
}

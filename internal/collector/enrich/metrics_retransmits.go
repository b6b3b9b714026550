package enrich

import (
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// The metric of feature retransmits: TCP segments retransmitted.
const MetricRetransmits = Prefix + "retransmits_total"

var retransmitsMetricNames = []string{MetricRetransmits}

type retransmitsMetrics struct{ retransmits *counterSeries }

func (m *retransmitsMetrics) register(r registrar) {
	m.retransmits = r.counterVec(MetricRetransmits, "TCP segments retransmitted, by source and destination namespace of the flow that carried them.",
		[]string{"src_namespace", "dst_namespace"})
}

// observe: retransmits come from the agent's retransmit hook, which sees
// every segment whatever the sampling rate: an exact count, not scaled.
func (m *retransmitsMetrics) observe(f *enriched.Flow, l *flowLabels) {
	if f.Retransmits > 0 && m.retransmits != nil {
		m.retransmits.add(l.now, float64(f.Retransmits), l.srcNS, l.dstNS)
	}
}

package enrich

import (
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// The metrics of feature tcp (issue #30: connects by result, resets, zero
// windows, handshake latency) are written by the collector's side of the
// feature; until then the group has none.
var tcpMetricNames = []string{}

type tcpMetrics struct{}

func (m *tcpMetrics) register(registrar) {}

func (m *tcpMetrics) observe(*enriched.Flow, *flowLabels) {}

package enrich

import (
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The metrics of feature xlat: flows conntrack NAT rewrote.
const (
	MetricTranslatedBytes = Prefix + "translated_bytes_total"
	MetricTranslatedFlows = Prefix + "translated_flows_total"

	// Values of the translated label: which side of the flow conntrack NAT
	// rewrote (address or port). A DNAT to a Service's backend is "dst" on
	// the request flow; its reply flow, un-DNATed, is "src".
	TranslatedDst  = "dst"
	TranslatedSrc  = "src"
	TranslatedBoth = "both"
)

var xlatMetricNames = []string{MetricTranslatedBytes, MetricTranslatedFlows}

type xlatMetrics struct{ bytes, flows *counterSeries }

func (m *xlatMetrics) register(r registrar) {
	labels := []string{"src_namespace", "src_workload", "dst_namespace", "dst_workload",
		"xlat_dst_namespace", "xlat_dst_workload", "translated"}
	m.bytes = r.counterVec(MetricTranslatedBytes, "Bytes of flows conntrack NAT translated (feature xlat; times their sampling rate), by source and destination namespace and workload as seen (a Service's virtual IP: the Service), the namespace and workload of the translated destination (the backend), and the side translated (dst, src, both).", labels)
	m.flows = r.counterVec(MetricTranslatedFlows, "Flow records conntrack NAT translated (feature xlat; one per flow per eviction period, not scaled), with the labels of translated_bytes_total.", labels)
}

func (m *xlatMetrics) observe(f *enriched.Flow, l *flowLabels) {
	if (m.bytes != nil || m.flows != nil) && (f.Bytes > 0 || f.Packets > 0) {
		if side := translatedSide(&f.Record); side != "" {
			// The translated destination's context; the flow's own when
			// only the source was translated.
			xNS, xW := l.dstNS, l.dstW
			if f.XlatDstAddr.IsValid() {
				xNS, xW = endpointLabels(&f.XlatDst)
			}
			lv := []string{l.srcNS, l.srcW, l.dstNS, l.dstW, xNS, xW, side}
			if m.bytes != nil {
				m.bytes.add(l.now, float64(f.Bytes)*l.scale, lv...)
			}
			if m.flows != nil {
				m.flows.add(l.now, 1, lv...)
			}
		}
	}
}

// translatedSide is the translated label of a flow: which side conntrack
// NAT rewrote (a translated address or port that differs from the flow's
// own), "" when the flow carries no translation or one that changes
// nothing.
func translatedSide(r *flow.Record) string {
	src := r.XlatSrcAddr.IsValid() && (r.XlatSrcAddr.Unmap() != r.SrcAddr.Unmap() || r.XlatSrcPort != r.SrcPort)
	dst := r.XlatDstAddr.IsValid() && (r.XlatDstAddr.Unmap() != r.DstAddr.Unmap() || r.XlatDstPort != r.DstPort)
	switch {
	case src && dst:
		return TranslatedBoth
	case dst:
		return TranslatedDst
	case src:
		return TranslatedSrc
	}
	return ""
}

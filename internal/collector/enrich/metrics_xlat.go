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
			// The flow's destination as the agent saw it (a Service's
			// virtual IP: the Service), l.dstNS being where NAT delivered
			// it (deliveredDst); the translated destination's context,
			// the flow's own when only the source was translated.
			dNS, dW := endpointLabels(&f.Dst)
			xNS, xW := dNS, dW
			if f.XlatDstAddr.IsValid() {
				xNS, xW = endpointLabels(&f.XlatDst)
			}
			lv := []string{l.srcNS, l.srcW, dNS, dW, xNS, xW, side}
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

// deliveredDst is the endpoint a flow's packets were delivered to: the
// translated destination when conntrack NAT rewrote the destination and
// the collector resolved it (a request to a Service: its backend pod; the
// reply of a masqueraded connection: the client behind the node's
// address), else the flow's own. The agent keys a translated flow on its
// packets before NAT, the source being the real sender
// (docs/design/counting.md, Translated packets), so the sender is always
// the flow's source: the flow metrics then count each packet once, between
// the workloads that exchanged it.
func deliveredDst(f *enriched.Flow) *enriched.K8sContext {
	if f.XlatDstAddr.IsValid() && f.XlatDst.Kind != "" &&
		(f.XlatDstAddr.Unmap() != f.DstAddr.Unmap() || f.XlatDstPort != f.DstPort) {
		return &f.XlatDst
	}
	return &f.Dst
}

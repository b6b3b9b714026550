// Package enriched is the collector's flow as its readers see it: the
// agent's flow.Record, the agent's identity (node, address) and the
// Kubernetes context of both ends (K8sContext), with its JSON line
// (Flow.AppendJSON) and its wire form in the FlowHistory API (ToProto,
// FromProto).
//
// The collector fills it (internal/collector/enrich resolves the
// addresses), keeps it (internal/collector/history) and prints it;
// `flowlens observe` decodes it from the collectors' streams and prints it
// with the same text formats (internal/shared/textfmt). It lives in shared
// so that observe links nothing of the collector.
package enriched

import (
	"net/netip"

	"github.com/flowlens/flowlens/pkg/flow"
)

// Flow is one received flow: the agent's record, the agent's identity, and
// when enrichment is on, the Kubernetes context of both ends.
type Flow struct {
	flow.Record
	NodeName string     // the agent's node
	AgentIP  netip.Addr // the agent's address (zero: unknown)
	// Enriched is set when the collector has a resolver: Src and Dst are
	// then filled (Kind external for addresses outside the cluster).
	Enriched bool
	Src, Dst K8sContext
	// XlatSrc and XlatDst are the context of the translated addresses
	// (Record.XlatSrcAddr, XlatDstAddr: feature xlat), filled like Src and
	// Dst for an enriched flow whose address of that side is set: for a
	// Service's virtual IP translated to a backend, XlatDst is the backend
	// pod. Zero otherwise.
	XlatSrc, XlatDst K8sContext
}

// AppendJSON appends f as one JSON object: the agent's (flow.Record's
// AppendJSON, same fields and order), then node_name and agent_ip, then,
// for an enriched flow, src_k8s and dst_k8s (K8sContext.AppendJSON: kind,
// namespace, name, workload, workload_kind, node, subnet, empty ones left
// out), and for an enriched translated flow (feature xlat) xlat_src_k8s and
// xlat_dst_k8s, each when that translated address is set.
func (f *Flow) AppendJSON(b []byte) []byte {
	b = f.Record.AppendJSON(b)
	b = b[:len(b)-1] // reopen the object
	b = append(b, `,"node_name":`...)
	b = flow.AppendJSONString(b, f.NodeName)
	b = append(b, `,"agent_ip":"`...)
	if f.AgentIP.IsValid() {
		b = f.AgentIP.AppendTo(b)
	}
	b = append(b, '"')
	if f.Enriched {
		b = append(b, `,"src_k8s":`...)
		b = f.Src.AppendJSON(b)
		b = append(b, `,"dst_k8s":`...)
		b = f.Dst.AppendJSON(b)
		if f.XlatSrcAddr.IsValid() {
			b = append(b, `,"xlat_src_k8s":`...)
			b = f.XlatSrc.AppendJSON(b)
		}
		if f.XlatDstAddr.IsValid() {
			b = append(b, `,"xlat_dst_k8s":`...)
			b = f.XlatDst.AppendJSON(b)
		}
	}
	return append(b, '}')
}

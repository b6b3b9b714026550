package history

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// ToProto is f in wire form.
func ToProto(f *enrich.Flow) *flowv1.HistoryFlow {
	var agentIP []byte
	if f.AgentIP.IsValid() {
		agentIP = flowpb.AddrBytes(f.AgentIP)
	}
	out := &flowv1.HistoryFlow{Flow: &flowv1.Flow{}, Enriched: f.Enriched}
	flowpb.ToProto(out.Flow, &f.Record, f.NodeName, agentIP)
	if f.Enriched {
		out.SrcK8S, out.DstK8S = metaToProto(&f.Src), metaToProto(&f.Dst)
		if f.XlatSrcAddr.IsValid() {
			out.XlatSrcK8S = metaToProto(&f.XlatSrc)
		}
		if f.XlatDstAddr.IsValid() {
			out.XlatDstK8S = metaToProto(&f.XlatDst)
		}
	}
	return out
}

// FromProto is the flow h carries; an invalid flow is an error
// (flowpb.Validate's).
func FromProto(h *flowv1.HistoryFlow) (enrich.Flow, error) {
	var f enrich.Flow
	if h.GetFlow() == nil {
		return f, flowpb.ErrInvalid
	}
	if err := flowpb.ToRecord(&f.Record, h.Flow); err != nil {
		return f, err
	}
	f.NodeName = h.Flow.NodeName
	f.AgentIP = flowpb.Addr(h.Flow.AgentIp)
	f.Enriched = h.Enriched
	f.Src, f.Dst = metaFromProto(h.SrcK8S), metaFromProto(h.DstK8S)
	f.XlatSrc, f.XlatDst = metaFromProto(h.XlatSrcK8S), metaFromProto(h.XlatDstK8S)
	return f, nil
}

func metaToProto(m *k8smeta.Meta) *flowv1.K8SContext {
	return &flowv1.K8SContext{Kind: string(m.Kind), Namespace: m.Namespace, Name: m.Name, Workload: m.Workload,
		WorkloadKind: m.WorkloadKind, Node: m.Node, Subnet: m.Subnet}
}

func metaFromProto(c *flowv1.K8SContext) k8smeta.Meta {
	if c == nil {
		return k8smeta.Meta{}
	}
	return k8smeta.Meta{Kind: k8smeta.Kind(c.Kind), Namespace: c.Namespace, Name: c.Name, Workload: c.Workload,
		WorkloadKind: c.WorkloadKind, Node: c.Node, Subnet: c.Subnet}
}

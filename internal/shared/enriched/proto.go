package enriched

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// ToProto is f in wire form (the FlowHistory API's HistoryFlow).
func ToProto(f *Flow) *flowv1.HistoryFlow {
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
func FromProto(h *flowv1.HistoryFlow) (Flow, error) {
	var f Flow
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

func metaToProto(m *K8sContext) *flowv1.K8SContext {
	return &flowv1.K8SContext{Kind: string(m.Kind), Namespace: m.Namespace, Name: m.Name, Workload: m.Workload,
		WorkloadKind: m.WorkloadKind, Node: m.Node, Subnet: m.Subnet}
}

func metaFromProto(c *flowv1.K8SContext) K8sContext {
	if c == nil {
		return K8sContext{}
	}
	return K8sContext{Kind: Kind(c.Kind), Namespace: c.Namespace, Name: c.Name, Workload: c.Workload,
		WorkloadKind: c.WorkloadKind, Node: c.Node, Subnet: c.Subnet}
}

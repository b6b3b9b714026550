package enriched

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// A flow survives its wire form: record, agent, every context; a plain
// (not enriched) flow stays plain, and a translated flow's contexts travel
// only for the sides that are translated.
func TestProtoRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := Flow{NodeName: "node-a", AgentIP: netip.MustParseAddr("192.0.2.1"), Enriched: true,
		Src: K8sContext{Kind: KindPod, Namespace: "shop", Name: "web-1", Workload: "web", WorkloadKind: "Deployment", Node: "node-a"},
		Dst: K8sContext{Kind: KindService, Namespace: "data", Name: "db", Workload: "db", WorkloadKind: WorkloadService},
		// XlatSrc is not sent: the source is not translated.
		XlatDst: K8sContext{Kind: KindPod, Namespace: "data", Name: "db-0", Workload: "db", WorkloadKind: "StatefulSet", Node: "node-b"},
	}
	f.SrcAddr, f.DstAddr, f.XlatDstAddr = netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.96.0.5"), netip.MustParseAddr("10.2.0.7")
	f.SrcPort, f.DstPort, f.XlatDstPort, f.Proto = 40000, 5432, 5432, 6
	f.StartTime, f.EndTime, f.Packets, f.Bytes, f.Sampling = t0, t0.Add(time.Second), 3, 180, 1
	h := ToProto(&f)
	if h.XlatSrcK8S != nil || h.XlatDstK8S.GetName() != "db-0" {
		t.Errorf("xlat contexts: %v %v", h.XlatSrcK8S, h.XlatDstK8S)
	}
	got, err := FromProto(h)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.AppendJSON(nil)) != string(f.AppendJSON(nil)) || got.Src != f.Src || got.Dst != f.Dst || got.XlatDst != f.XlatDst {
		t.Errorf("round trip:\n got %s\nwant %s", got.AppendJSON(nil), f.AppendJSON(nil))
	}

	plain := f
	plain.Enriched, plain.AgentIP = false, netip.Addr{}
	h = ToProto(&plain)
	if h.SrcK8S != nil || h.DstK8S != nil || h.XlatDstK8S != nil || h.Flow.AgentIp != nil {
		t.Errorf("plain flow carries contexts or an agent address: %v", h)
	}
	if got, err = FromProto(h); err != nil || got.Enriched || got.Src != (K8sContext{}) || got.AgentIP.IsValid() {
		t.Errorf("plain flow back: %+v %v", got, err)
	}

	if _, err := FromProto(&flowv1.HistoryFlow{}); !errors.Is(err, flowpb.ErrInvalid) {
		t.Errorf("no flow: %v, want flowpb.ErrInvalid", err)
	}
}

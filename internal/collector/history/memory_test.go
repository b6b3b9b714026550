package history

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// fillHistory sends n flows through the collector's real pipeline
// (protobuf → records → enrichment from a static cluster) into a Service,
// in batches of 1000 as agents send them: two interfaces per flow, both
// ends pods, drop causes and DNS names as real flows carry.
func fillHistory(tb testing.TB, s *Service, n int) {
	tb.Helper()
	static := k8smeta.StaticSource{}
	for i := range 256 {
		a := netip.AddrFrom4([4]byte{10, 244, 0, byte(i)})
		static[a] = enriched.K8sContext{Kind: enriched.KindPod, Namespace: "shop", Name: "web-" + a.String(), Workload: "web", WorkloadKind: "Deployment", Node: "node-a"}
	}
	pl := &enrich.Pipeline{Resolver: &k8smeta.Resolver{Source: static}, Sink: s.Add}
	enc := flowpb.NewEncoder(flowpb.Identity{NodeName: "node-a", AgentIP: netip.MustParseAddr("192.0.2.1")})
	t0 := time.Now()
	batch := make([]flow.Record, 1000)
	for sent := 0; sent < n; sent += len(batch) {
		for i := range batch {
			k := sent + i
			batch[i] = flow.Record{SrcAddr: netip.AddrFrom4([4]byte{10, 244, 0, byte(k)}), DstAddr: netip.AddrFrom4([4]byte{10, 244, 0, byte(k >> 8)}),
				SrcPort: uint16(k), DstPort: 443, Proto: 6, Bytes: 1500, Packets: 1, TCPFlags: 0x18, EthType: 0x800, Sampling: 1,
				StartTime: t0, EndTime: t0,
				RTTFields:   flow.RTTFields{RTT: time.Millisecond},
				DropsFields: flow.DropsFields{DropPackets: uint64(k % 2), DropCause: "NETFILTER_DROP"},
				Interfaces:  []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirIngress}, {Name: "veth1a2b3c", Ifindex: 7, Netns: "host", Direction: flow.DirEgress}}}
		}
		// Fresh messages per batch, as the gRPC server decodes them.
		msgs := make([]*flowv1.Flow, len(batch))
		for i, m := range enc.Encode(batch) {
			msgs[i] = &flowv1.Flow{}
			flowpb.ToProto(msgs[i], &batch[i], m.NodeName, m.AgentIp)
		}
		if err := pl.Handle(context.Background(), &receiver.Batch{Flows: msgs}); err != nil {
			tb.Fatal(err)
		}
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestMemoryPer100k measures the heap a full history of 100,000 flows
// holds (docs/observe.md quotes it) and keeps it under a bound.
func TestMemoryPer100k(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 100k flows: skipped in short mode")
	}
	before := heap()
	s := NewService(Options{Size: 100_000})
	fillHistory(t, s, 100_000)
	after := heap()
	if s.Len() != 100_000 {
		t.Fatalf("history holds %d flows", s.Len())
	}
	used := int64(after) - int64(before)
	t.Logf("history of 100000 flows: %.1f MiB (%d bytes per flow)", float64(used)/(1<<20), used/100_000)
	if used > 128<<20 {
		t.Errorf("history of 100k flows holds %d MiB, more than 128 MiB", used>>20)
	}
	runtime.KeepAlive(s)
}

// BenchmarkHistoryAdd is the cost of storing flows in a full history
// (through the pipeline).
func BenchmarkHistoryAdd(b *testing.B) {
	s := NewService(Options{Size: 100_000})
	fillHistory(b, s, 100_000)
	b.ResetTimer()
	for b.Loop() {
		fillHistory(b, s, 1000)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/flow")
}

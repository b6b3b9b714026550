package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/collector/history"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/servicemap"
	"github.com/flowlens/flowlens/pkg/flow"
)

// bigHistory is a full history of 100,000 flows between 2,000 workloads
// (20 namespaces of 100), each flow from one workload to another of the
// next ten, one in 50 with drops, ending in the last minute.
func bigHistory(tb testing.TB, now time.Time) *history.Service {
	const flows, workloads = 100_000, 2_000
	h := history.NewService(history.Options{Size: flows, MaxAge: time.Hour})
	ctx := func(i int) enriched.K8sContext {
		return enriched.K8sContext{Kind: enriched.KindPod, Namespace: fmt.Sprintf("ns-%02d", i/100), Name: fmt.Sprintf("w-%04d-0", i),
			Workload: fmt.Sprintf("w-%04d", i), WorkloadKind: "Deployment", Node: "node-1"}
	}
	batch := make([]enriched.Flow, 0, 1000)
	for i := range flows {
		src := i % workloads
		dst := (src + 1 + (i/workloads)%10) % workloads
		f := enriched.Flow{Record: flow.Record{SrcAddr: netip.AddrFrom4([4]byte{10, 1, byte(src >> 8), byte(src)}),
			DstAddr: netip.AddrFrom4([4]byte{10, 1, byte(dst >> 8), byte(dst)}), SrcPort: uint16(30000 + i%1000), DstPort: 8080, Proto: 6,
			Bytes: uint64(100 + i%1500), Packets: 2, StartTime: now.Add(-time.Minute), EndTime: now.Add(-time.Duration(i%60) * time.Second),
			RTTFields: flow.RTTFields{RTT: time.Duration(100+i%900) * time.Microsecond}},
			NodeName: "node-1", Enriched: true, Src: ctx(src), Dst: ctx(dst)}
		if i%50 == 0 {
			f.DropPackets, f.DropCause = 1, "TCP_INVALID_SEQUENCE"
		}
		if batch = append(batch, f); len(batch) == cap(batch) {
			h.Add(context.Background(), batch)
			batch = make([]enriched.Flow, 0, 1000)
		}
	}
	if h.Len() != flows {
		tb.Fatalf("history of %d flows, want %d", h.Len(), flows)
	}
	return h
}

// BenchmarkGraph100kFlows2kWorkloads: GET /api/v1/graph over a full
// history of 100,000 flows across 2,000 workloads (20,000 edges): the
// answer is truncated within the default caps (300 nodes, 1000 edges).
// docs/benchmarks.md reports its time per request.
func BenchmarkGraph100kFlows2kWorkloads(b *testing.B) {
	now := time.Now()
	h := bigHistory(b, now)
	srv := Handler(Options{History: h, now: func() time.Time { return now }})
	b.ReportAllocs()
	b.ResetTimer()
	var size int
	for range b.N {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("GET", PathGraph+"?since=5m", nil))
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
		size = rec.Body.Len()
		if b.N > 1 {
			continue
		}
		var g servicemap.Graph
		if err := json.Unmarshal(rec.Body.Bytes(), &g); err != nil {
			b.Fatal(err)
		}
		if !g.Truncated || len(g.Nodes) > servicemap.DefaultMaxNodes || len(g.Edges) > servicemap.DefaultMaxEdges || g.Flows != 100_000 ||
			len(g.Edges)+g.OmittedEdges != 20_000 || len(g.Nodes)+g.OmittedNodes != 2_000 {
			b.Fatalf("graph: %d nodes (%d omitted), %d edges (%d omitted), %d flows, truncated %v", len(g.Nodes), g.OmittedNodes,
				len(g.Edges), g.OmittedEdges, g.Flows, g.Truncated)
		}
		b.Logf("%d nodes (%d omitted), %d edges (%d omitted), %d flows, %d bytes", len(g.Nodes), g.OmittedNodes, len(g.Edges), g.OmittedEdges, g.Flows, size)
	}
	b.ReportMetric(float64(size), "bytes/answer")
}

// BenchmarkFlows100k: GET /api/v1/flows of one edge over the same history.
func BenchmarkFlows100k(b *testing.B) {
	now := time.Now()
	h := bigHistory(b, now)
	srv := Handler(Options{History: h, now: func() time.Time { return now }})
	b.ResetTimer()
	for range b.N {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("GET", PathFlows+"?since=5m&source=workload:ns-00/Deployment/w-0000&target=workload:ns-00/Deployment/w-0001", nil))
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}

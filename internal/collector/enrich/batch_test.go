package enrich_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
	"github.com/flowlens/flowlens/pkg/flow"
)

// TestBatchSharedAddresses: a batch whose flows share addresses (resolved
// once per batch) enriches every flow as if each were alone, counts a miss
// per flow endpoint (not per address), and gives each flow its own
// interfaces, carved from one array without overlapping: appending to one
// flow's list leaves the next flow's intact.
func TestBatchSharedAddresses(t *testing.T) {
	m, err := enrich.NewMetrics(enrich.MetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []enriched.Flow
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m, Sink: func(_ context.Context, flows []enriched.Flow) error {
		got = flows
		return nil
	}}
	b := batch(
		fl{src: "10.0.0.1", dst: "10.0.1.1", bytes: 100, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-a"},
		fl{src: "10.0.0.1", dst: "203.0.113.9", bytes: 200, packets: 2, sampling: 1, node: "node-a"}, // no interfaces
		fl{src: "203.0.113.9", dst: "10.0.0.1", bytes: 300, packets: 3, sampling: 1, dir: flow.DirIngress, node: "node-a"},
		fl{src: "10.0.1.1", dst: "10.0.0.1", bytes: 400, packets: 4, sampling: 1, dir: flow.DirBoth, node: "node-b"},
	)
	if err := p.Handle(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	ext := enriched.K8sContext{Kind: enriched.KindExternal}
	want := []struct {
		src, dst enriched.K8sContext
		dir      flow.Direction
		node     string
	}{{web1, db0, flow.DirEgress, "node-a"}, {web1, ext, 0, "node-a"}, {ext, web1, flow.DirIngress, "node-a"}, {db0, web1, flow.DirBoth, "node-b"}}
	if len(got) != len(want) {
		t.Fatalf("%d flows, want %d", len(got), len(want))
	}
	for i, w := range want {
		f := &got[i]
		if f.Src != w.src || f.Dst != w.dst || f.NodeName != w.node || !f.Enriched {
			t.Errorf("flow %d: src %+v dst %+v node %q enriched %v; want %+v, %+v, %q", i, f.Src, f.Dst, f.NodeName, f.Enriched, w.src, w.dst, w.node)
		}
		if f.AgentIP != netip.MustParseAddr("192.0.2.1") || f.Bytes != uint64(100*(i+1)) {
			t.Errorf("flow %d: agent %v bytes %d", i, f.AgentIP, f.Bytes)
		}
		if w.dir == 0 {
			if f.Interfaces != nil {
				t.Errorf("flow %d: interfaces %+v, want none", i, f.Interfaces)
			}
			continue
		}
		wantIfs := []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", Direction: w.dir}, {Name: "veth1", Ifindex: 7, Netns: "host", Direction: flow.DirIngress}}
		if !slices.Equal(f.Interfaces, wantIfs) || cap(f.Interfaces) != len(wantIfs) {
			t.Errorf("flow %d: interfaces %+v (cap %d), want %+v (cap %d)", i, f.Interfaces, cap(f.Interfaces), wantIfs, len(wantIfs))
		}
	}
	_ = append(got[0].Interfaces, flow.Interface{Name: "extra"})
	if got[2].Interfaces[0].Name != "eth0" {
		t.Errorf("appending to flow 0's interfaces overwrote flow 2's: %+v", got[2].Interfaces)
	}
	fams := promtest.GatherFrom(t, m.Registry())
	promtest.Expect(t, fams, 1, enrich.MetricEnrichmentMisses, "side=src")
	promtest.Expect(t, fams, 1, enrich.MetricEnrichmentMisses, "side=dst")
	promtest.Expect(t, fams, 4, enrich.MetricReceivedFlows)
}

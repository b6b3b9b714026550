package enrich_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

// BenchmarkMetricsObserve is the collector's metrics on its ingest path: a
// batch of 256 enriched flows between 16 pod workloads, each carrying
// every feature's group (flow.Groups' samples), all metrics enabled.
// Reported per flow; allocations per flow must not grow.
func BenchmarkMetricsObserve(b *testing.B) {
	m, err := enrich.NewMetrics(enrich.MetricsOptions{})
	if err != nil {
		b.Fatal(err)
	}
	flows := make([]enriched.Flow, 256)
	for i := range flows {
		f := &flows[i]
		f.SrcAddr, f.DstAddr = netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), netip.AddrFrom4([4]byte{10, 0, 1, byte(i)})
		f.SrcPort, f.DstPort, f.Bytes, f.Packets, f.Sampling = uint16(30000+i), 443, 1500, 3, 1
		for _, g := range flow.Groups {
			g.Sample(&f.Record)
		}
		f.NodeName = "node-a"
		pod := func(n int) enriched.K8sContext {
			return enriched.K8sContext{Kind: enriched.KindPod, Namespace: fmt.Sprint("ns-", n%4), Name: fmt.Sprint("pod-", n),
				Workload: fmt.Sprint("web-", n%16), Node: "node-a"}
		}
		f.Enriched, f.Src, f.Dst, f.XlatDst = true, pod(i), pod(i+1), pod(i+2)
	}
	m.Observe(flows) // the series exist: what is measured is the steady state
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		m.Observe(flows)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(flows)), "ns/flow")
}

// A feature's metrics are the names its registration asks for, whatever
// MetricsOptions.Enabled serves; a name without metrics has none.
func TestFeatureMetrics(t *testing.T) {
	want := []string{enrich.MetricDNSResponses, enrich.MetricDNSTimeouts, enrich.MetricDNSLatency}
	if got := enrich.FeatureMetrics("dns"); !slices.Equal(got, want) {
		t.Errorf("FeatureMetrics(dns) = %v, want %v", got, want)
	}
	if got := enrich.FeatureMetrics("drops"); !slices.Equal(got, []string{enrich.MetricDropPackets, enrich.MetricDropBytes}) {
		t.Errorf("FeatureMetrics(drops) = %v", got)
	}
	if got := enrich.FeatureMetrics("no-such-feature"); got != nil {
		t.Errorf("FeatureMetrics(no-such-feature) = %v, want nil", got)
	}
}

package enrich_test

import (
	"context"
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// Service traffic as the agent with xlat reports it (docs/design/counting.md,
// Translated packets): one record per direction, keyed on the packets
// before NAT, the translation in xlat_*. The flow metrics count each packet
// once, between the workloads that exchanged it: the destination is the
// backend a request was delivered to, not the Service, and the client a
// masqueraded reply was delivered to, not the node; the node series name
// the backend's node. translated_* keep the Service as dst_*.
func TestServiceFlowMetricsCountOnce(t *testing.T) {
	m, err := enrich.NewMetrics(enrich.MetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m, Sink: func(context.Context, []enriched.Flow) error { return nil }}
	b := &receiver.Batch{Flows: []*flowv1.Flow{
		// shop/web-1 → kube-dns's VIP, DNATed to db-0: 100 packets.
		xl(fl{src: "10.0.0.1", dst: "10.96.0.10", bytes: 6400, packets: 100, sampling: 1, dir: flow.DirEgress, node: "node-a"},
			"10.0.0.1", 40000, "10.0.1.1", 5353),
		// Its reply, db-0 → web-1, un-DNATed on the way: 100 packets.
		xl(fl{src: "10.0.1.1", dst: "10.0.0.1", bytes: 6400, packets: 100, sampling: 1, dir: flow.DirIngress, node: "node-b"},
			"10.96.0.10", 53, "10.0.0.1", 40000),
		// web-2 → db-0 masqueraded behind node-a, and db-0's reply to
		// node-a's address, un-masqueraded to web-2: 30 packets each way.
		xl(fl{src: "10.0.0.2", dst: "10.0.1.1", bytes: 1800, packets: 30, sampling: 1, dir: flow.DirBoth, node: "node-b"},
			"192.168.0.11", 61000, "10.0.1.1", 80),
		xl(fl{src: "10.0.1.1", dst: "192.168.0.11", bytes: 1800, packets: 30, sampling: 1, dir: flow.DirBoth, node: "node-b"},
			"10.0.1.1", 80, "10.0.0.2", 40000),
	}}
	if err := p.Handle(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	fams := promtest.GatherFrom(t, m.Registry())
	pk := enrich.Prefix + "flow_packets_total"
	series := func(sns, sw, dns, dw, dir string) []string {
		return []string{"direction=" + dir, "dst_namespace=" + dns, "dst_workload=" + dw, "src_namespace=" + sns, "src_workload=" + sw}
	}
	promtest.Expect(t, fams, 100, pk, series("shop", "web", "db", "db", "egress")...)
	promtest.Expect(t, fams, 100, pk, series("db", "db", "shop", "web", "ingress")...)
	promtest.Expect(t, fams, 30, pk, series("shop", "web", "db", "db", "both")...)
	promtest.Expect(t, fams, 30, pk, series("db", "db", "shop", "web", "both")...)
	if sum, _ := promtest.Sum(fams, pk); sum != 260 {
		t.Errorf("%s sums to %v, want the 260 packets sent", pk, sum)
	}
	if _, ok := promtest.Sum(fams, pk, "dst_workload=kube-dns"); ok {
		t.Errorf("%s has a series to the Service: its packets went to the backend", pk)
	}
	if _, ok := promtest.Sum(fams, pk, "dst_workload=node-a"); ok {
		t.Errorf("%s has a series to the masquerading node: its packets went to web-2", pk)
	}
	nb := enrich.Prefix + "node_bytes_total"
	promtest.Expect(t, fams, 6400, nb, "dst_node=node-b", "src_node=node-a")
	promtest.Expect(t, fams, 6400, nb, "dst_node=node-a", "src_node=node-b")
	promtest.Expect(t, fams, 2*1800, nb, "dst_node=node-b", "src_node=node-b")
	promtest.Expect(t, fams, 6400, enrich.MetricTranslatedBytes, "dst_namespace=kube-system", "dst_workload=kube-dns",
		"src_namespace=shop", "src_workload=web", "translated=dst", "xlat_dst_namespace=db", "xlat_dst_workload=db")
}

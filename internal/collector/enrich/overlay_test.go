package enrich_test

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// A tunnel flow's own record (agent option --overlay-outer-flows, marked
// overlay_outer) is counted as a record (flows_total) and in no sum: the
// bytes, packets and node series are exactly those of the known flows
// without it, though it carries 216 packets between two nodes.
func TestOverlayOuterSkippedInSums(t *testing.T) {
	outer := flow.Record{SrcAddr: netip.MustParseAddr("192.168.0.11"), DstAddr: netip.MustParseAddr("192.168.0.12"),
		SrcPort: 51000, DstPort: 4789, Proto: 17, Bytes: 216 * 1500, Packets: 216, Sampling: 1, StartTime: t0, EndTime: t0.Add(time.Second),
		Interfaces: []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirEgress}},
		Tunnel: flow.Tunnel{TunnelType: flow.TunnelVXLAN, TunnelSrcAddr: netip.MustParseAddr("192.168.0.11"),
			TunnelDstAddr: netip.MustParseAddr("192.168.0.12"), TunnelVNI: 1, OverlayOuter: true}}
	op := &flowv1.Flow{}
	flowpb.ToProto(op, &outer, "node-a", flowpb.AddrBytes(netip.MustParseAddr("192.0.2.1")))

	sums := func(withOuter bool) (series map[string]string, flows float64) {
		m, err := enrich.NewMetrics(enrich.MetricsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m}
		b := batch(known...)
		if withOuter {
			b.Flows = append(b.Flows, op)
		}
		if err := p.Handle(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		mfs, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		series = map[string]string{}
		for _, mf := range mfs {
			switch mf.GetName() {
			case enrich.MetricFlowBytes, enrich.MetricFlowPackets, enrich.MetricNodeBytes:
				var rows []string
				for _, s := range mf.GetMetric() {
					row := ""
					for _, l := range s.GetLabel() {
						row += l.GetName() + "=" + l.GetValue() + " "
					}
					rows = append(rows, row+strconv.FormatFloat(s.GetCounter().GetValue(), 'f', -1, 64))
				}
				series[mf.GetName()] = strings.Join(rows, "\n")
			case enrich.MetricFlows:
				flows = mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return series, flows
	}
	without, n0 := sums(false)
	with, n1 := sums(true)
	if len(without) != 3 {
		t.Fatalf("series families %v, want the 3 sums", without)
	}
	for name, w := range without {
		if with[name] != w {
			t.Errorf("%s with the overlay_outer record:\n%s\nwant, as without it:\n%s", name, with[name], w)
		}
	}
	if n1 != n0+1 {
		t.Errorf("flows_total %v with the overlay_outer record, want %v", n1, n0+1)
	}
}

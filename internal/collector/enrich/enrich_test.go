package enrich_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// A small static cluster.
var (
	web1   = enriched.K8sContext{Kind: enriched.KindPod, Namespace: "shop", Name: "web-1", Workload: "web", WorkloadKind: "Deployment", Node: "node-a"}
	web2   = enriched.K8sContext{Kind: enriched.KindPod, Namespace: "shop", Name: "web-2", Workload: "web", WorkloadKind: "Deployment", Node: "node-b"}
	db0    = enriched.K8sContext{Kind: enriched.KindPod, Namespace: "db", Name: "db-0", Workload: "db", WorkloadKind: "StatefulSet", Node: "node-b"}
	dns    = enriched.K8sContext{Kind: enriched.KindService, Namespace: "kube-system", Name: "kube-dns", Workload: "kube-dns", WorkloadKind: "Service"}
	nodeA  = enriched.K8sContext{Kind: enriched.KindNode, Name: "node-a", Workload: "node-a", WorkloadKind: "Node", Node: "node-a"}
	static = k8smeta.StaticSource{
		netip.MustParseAddr("10.0.0.1"):     web1,
		netip.MustParseAddr("10.0.0.2"):     web2,
		netip.MustParseAddr("10.0.1.1"):     db0,
		netip.MustParseAddr("10.96.0.10"):   dns,
		netip.MustParseAddr("192.168.0.11"): nodeA,
	}
)

func resolver(t *testing.T) *k8smeta.Resolver {
	t.Helper()
	subnets, err := k8smeta.ParseSubnets("corp=172.16.0.0/12")
	if err != nil {
		t.Fatal(err)
	}
	return &k8smeta.Resolver{Source: static, Subnets: subnets}
}

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)

type fl struct {
	src, dst       string
	bytes, packets uint64
	sampling       uint32
	dir            flow.Direction // 0: no interface (partial flow)
	node           string
	rtt            time.Duration
	retransmits    uint64
	dropP, dropB   uint64
	cause          string
	tcp            flow.TCPFields
}

func (x fl) proto() *flowv1.Flow {
	r := flow.Record{SrcAddr: netip.MustParseAddr(x.src), DstAddr: netip.MustParseAddr(x.dst), SrcPort: 40000, DstPort: 80, Proto: 6,
		Bytes: x.bytes, Packets: x.packets, Sampling: x.sampling, StartTime: t0, EndTime: t0.Add(time.Second),
		RTTFields:         flow.RTTFields{RTT: x.rtt, RTTMax: x.rtt},
		RetransmitsFields: flow.RetransmitsFields{Retransmits: x.retransmits},
		DropsFields:       flow.DropsFields{DropPackets: x.dropP, DropBytes: x.dropB, DropCause: x.cause},
		TCPFields:         x.tcp}
	if x.dir != 0 {
		r.Interfaces = []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", Direction: x.dir}, {Name: "veth1", Ifindex: 7, Netns: "host", Direction: flow.DirIngress}}
	} else {
		r.Partial = true
	}
	p := &flowv1.Flow{}
	flowpb.ToProto(p, &r, x.node, flowpb.AddrBytes(netip.MustParseAddr("192.0.2.1")))
	return p
}

func batch(flows ...fl) *receiver.Batch {
	b := &receiver.Batch{}
	for _, f := range flows {
		b.Flows = append(b.Flows, f.proto())
	}
	return b
}

// The known flows of TestMetricsExactValues.
var known = []fl{
	// shop/web → db/db, egress: 1000×1 + 500×4 bytes, 10×1 + 5×4 packets.
	{src: "10.0.0.1", dst: "10.0.1.1", bytes: 1000, packets: 10, sampling: 1, dir: flow.DirEgress, node: "node-a", rtt: 2 * time.Millisecond},
	{src: "10.0.0.2", dst: "10.0.1.1", bytes: 500, packets: 5, sampling: 4, dir: flow.DirEgress, node: "node-b"},
	// db → shop, ingress, sampled 1:4; 2 retransmits (not scaled).
	{src: "10.0.1.1", dst: "10.0.0.1", bytes: 300, packets: 3, sampling: 4, dir: flow.DirIngress, node: "node-b", rtt: 300 * time.Microsecond, retransmits: 2},
	// shop/web → the internet (no subnet), both; one drop (not scaled).
	{src: "10.0.0.1", dst: "8.8.8.8", bytes: 100, packets: 1, sampling: 1, dir: flow.DirBoth, node: "node-a", dropP: 1, dropB: 60, cause: "NETFILTER_DROP"},
	// corp → the kube-dns Service, ingress, 1:2.
	{src: "172.16.3.3", dst: "10.96.0.10", bytes: 80, packets: 1, sampling: 2, dir: flow.DirIngress, node: "node-a"},
	// A partial flow: drops only, no interface, sampling 0 (counts as 1).
	{src: "10.0.0.1", dst: "172.16.9.9", node: "node-a", sampling: 0, dropP: 3, dropB: 180, cause: "NO_SOCKET"},
	// Node → pod, egress; a drop with a cause that is not a kernel name.
	{src: "192.168.0.11", dst: "10.0.0.2", bytes: 50, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-a", dropP: 1, dropB: 50, cause: "bad cause!"},
	// An RTT of 20 s lands in +Inf.
	{src: "10.0.0.2", dst: "10.0.0.1", bytes: 10, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-b", rtt: 20 * time.Second},
}

const wantKnown = `
# HELP flowlens_collector_flow_bytes_total Bytes of flows (L2 frame bytes counted on each flow's first interface, times its sampling rate), by source and destination namespace and workload and the direction of the counting interface.
# TYPE flowlens_collector_flow_bytes_total counter
flowlens_collector_flow_bytes_total{direction="both",dst_namespace="",dst_workload="external",src_namespace="shop",src_workload="web"} 100
flowlens_collector_flow_bytes_total{direction="egress",dst_namespace="db",dst_workload="db",src_namespace="shop",src_workload="web"} 3000
flowlens_collector_flow_bytes_total{direction="egress",dst_namespace="shop",dst_workload="web",src_namespace="",src_workload="node-a"} 50
flowlens_collector_flow_bytes_total{direction="egress",dst_namespace="shop",dst_workload="web",src_namespace="shop",src_workload="web"} 10
flowlens_collector_flow_bytes_total{direction="ingress",dst_namespace="kube-system",dst_workload="kube-dns",src_namespace="",src_workload="corp"} 160
flowlens_collector_flow_bytes_total{direction="ingress",dst_namespace="shop",dst_workload="web",src_namespace="db",src_workload="db"} 1200
# HELP flowlens_collector_flow_packets_total Packets of flows (times their sampling rate), by source and destination namespace and workload and the direction of the counting interface.
# TYPE flowlens_collector_flow_packets_total counter
flowlens_collector_flow_packets_total{direction="both",dst_namespace="",dst_workload="external",src_namespace="shop",src_workload="web"} 1
flowlens_collector_flow_packets_total{direction="egress",dst_namespace="db",dst_workload="db",src_namespace="shop",src_workload="web"} 30
flowlens_collector_flow_packets_total{direction="egress",dst_namespace="shop",dst_workload="web",src_namespace="",src_workload="node-a"} 1
flowlens_collector_flow_packets_total{direction="egress",dst_namespace="shop",dst_workload="web",src_namespace="shop",src_workload="web"} 1
flowlens_collector_flow_packets_total{direction="ingress",dst_namespace="kube-system",dst_workload="kube-dns",src_namespace="",src_workload="corp"} 2
flowlens_collector_flow_packets_total{direction="ingress",dst_namespace="shop",dst_workload="web",src_namespace="db",src_workload="db"} 12
# HELP flowlens_collector_node_bytes_total Bytes of flows (times their sampling rate) by the node of each endpoint ("" for endpoints not on a node: Services, external addresses).
# TYPE flowlens_collector_node_bytes_total counter
flowlens_collector_node_bytes_total{dst_node="",src_node=""} 160
flowlens_collector_node_bytes_total{dst_node="",src_node="node-a"} 100
flowlens_collector_node_bytes_total{dst_node="node-a",src_node="node-b"} 1210
flowlens_collector_node_bytes_total{dst_node="node-b",src_node="node-a"} 1050
flowlens_collector_node_bytes_total{dst_node="node-b",src_node="node-b"} 2000
# HELP flowlens_collector_drop_packets_total Packets the kernel dropped, by source and destination namespace and drop cause (the kernel's drop reason).
# TYPE flowlens_collector_drop_packets_total counter
flowlens_collector_drop_packets_total{cause="NETFILTER_DROP",dst_namespace="",src_namespace="shop"} 1
flowlens_collector_drop_packets_total{cause="NO_SOCKET",dst_namespace="",src_namespace="shop"} 3
flowlens_collector_drop_packets_total{cause="OTHER",dst_namespace="shop",src_namespace=""} 1
# HELP flowlens_collector_drop_bytes_total Bytes of the packets the kernel dropped, by source and destination namespace and drop cause.
# TYPE flowlens_collector_drop_bytes_total counter
flowlens_collector_drop_bytes_total{cause="NETFILTER_DROP",dst_namespace="",src_namespace="shop"} 60
flowlens_collector_drop_bytes_total{cause="NO_SOCKET",dst_namespace="",src_namespace="shop"} 180
flowlens_collector_drop_bytes_total{cause="OTHER",dst_namespace="shop",src_namespace=""} 50
# HELP flowlens_collector_retransmits_total TCP segments retransmitted, by source and destination namespace of the flow that carried them.
# TYPE flowlens_collector_retransmits_total counter
flowlens_collector_retransmits_total{dst_namespace="shop",src_namespace="db"} 2
# HELP flowlens_collector_flows_total Flow records received and processed (rate() is flows per second).
# TYPE flowlens_collector_flows_total counter
flowlens_collector_flows_total 8
# HELP flowlens_collector_sampling Sampling rate the agent of each node reports on its latest flows (1 in N packets accounted; 1 = every packet).
# TYPE flowlens_collector_sampling gauge
flowlens_collector_sampling{node="node-a"} 1
flowlens_collector_sampling{node="node-b"} 1
# HELP flowlens_collector_received_flows_total Flows received from agents, valid ones handed to the pipeline.
# TYPE flowlens_collector_received_flows_total counter
flowlens_collector_received_flows_total 8
# HELP flowlens_collector_enrichment_misses_total Flow endpoints whose address is not a pod, Service or node of the cluster (enrichment on), by side.
# TYPE flowlens_collector_enrichment_misses_total counter
flowlens_collector_enrichment_misses_total{side="dst"} 2
flowlens_collector_enrichment_misses_total{side="src"} 1
# HELP flowlens_collector_decode_errors_total Messages from agents that did not decode or held an invalid flow (refused with InvalidArgument), plus flows the pipeline could not convert.
# TYPE flowlens_collector_decode_errors_total counter
flowlens_collector_decode_errors_total 7
# HELP flowlens_collector_informer_synced 1 once the informer of the resource has listed it (the collector resolves addresses from its cache), 0 before.
# TYPE flowlens_collector_informer_synced gauge
flowlens_collector_informer_synced{resource="nodes"} 0
flowlens_collector_informer_synced{resource="pods"} 1
`

const wantRTT = `
# HELP flowlens_collector_rtt_seconds Smoothed TCP round-trip time, observed once per flow that reports one (its latest value in the eviction period), by source and destination namespace.
# TYPE flowlens_collector_rtt_seconds histogram
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="5e-05"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.0001"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.00025"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.0005"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.001"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.0025"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.005"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.01"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.025"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.05"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.1"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.25"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="0.5"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="1"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="2.5"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="5"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="10"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="db",src_namespace="shop",le="+Inf"} 1
flowlens_collector_rtt_seconds_sum{dst_namespace="db",src_namespace="shop"} 0.002
flowlens_collector_rtt_seconds_count{dst_namespace="db",src_namespace="shop"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="5e-05"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.0001"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.00025"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.0005"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.001"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.0025"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.005"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.01"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.025"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.05"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.1"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.25"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="0.5"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="1"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="2.5"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="5"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="10"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="db",le="+Inf"} 1
flowlens_collector_rtt_seconds_sum{dst_namespace="shop",src_namespace="db"} 0.0003
flowlens_collector_rtt_seconds_count{dst_namespace="shop",src_namespace="db"} 1
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="5e-05"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.0001"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.00025"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.0005"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.001"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.0025"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.005"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.01"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.025"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.05"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.1"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.25"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="0.5"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="1"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="2.5"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="5"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="10"} 0
flowlens_collector_rtt_seconds_bucket{dst_namespace="shop",src_namespace="shop",le="+Inf"} 1
flowlens_collector_rtt_seconds_sum{dst_namespace="shop",src_namespace="shop"} 20
flowlens_collector_rtt_seconds_count{dst_namespace="shop",src_namespace="shop"} 1
`

// Known flows in, exact values out: bytes and packets scaled by each
// flow's sampling rate, drops and retransmits as counted, one RTT
// observation per flow reporting one, health counters.
func TestMetricsExactValues(t *testing.T) {
	m, err := enrich.NewMetrics(enrich.MetricsOptions{
		DecodeErrors: func() uint64 { return 7 },
		Informers:    func() map[string]bool { return map[string]bool{"pods": true, "nodes": false} },
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m}
	// Two batches, as from two agents.
	if err := p.Handle(context.Background(), batch(known[:3]...)); err != nil {
		t.Fatal(err)
	}
	if err := p.Handle(context.Background(), batch(known[3:]...)); err != nil {
		t.Fatal(err)
	}
	if err := gatherAndCompare(t, m.Registry(), strings.NewReader(wantKnown+wantRTT)); err != nil {
		t.Error(err)
	}
}

// A partial flow (no interface, no bytes) counts in drops, not in bytes.
func TestPartialFlowsCountOnlyDrops(t *testing.T) {
	m, _ := enrich.NewMetrics(enrich.MetricsOptions{})
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m}
	if err := p.Handle(context.Background(), batch(known[5])); err != nil {
		t.Fatal(err)
	}
	if n := seriesPerFamily(t, m)[enrich.MetricFlowBytes]; n != 0 {
		t.Errorf("partial flow made %d flow_bytes series", n)
	}
}

// seriesPerFamily gathers the registry and counts the series of each
// flowlens_collector_ family (a histogram's label set counts once).
func seriesPerFamily(t *testing.T, m *enrich.Metrics) map[string]int {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), enrich.Prefix) {
			out[mf.GetName()] = len(mf.GetMetric())
		}
	}
	return out
}

func labelNames(mf *dto.MetricFamily) []string {
	var out []string
	for _, lp := range mf.GetMetric()[0].GetLabel() {
		out = append(out, lp.GetName())
	}
	return out
}

// A cluster of 3 namespaces × 2 workloads × 5 pods on 2 nodes, every pod
// talking to every pod: the number of series is set by the label sets,
// namespaces and workloads by default, pods only with PodLabels.
func TestCardinalityWithinLabelSets(t *testing.T) {
	const namespaces, workloads, podsPer, nodes = 3, 2, 5, 2
	src := k8smeta.StaticSource{}
	var addrs []string
	i := 0
	for n := range namespaces {
		for w := range workloads {
			for p := range podsPer {
				ip := netip.AddrFrom4([4]byte{10, byte(n), byte(w), byte(p + 1)})
				src[ip] = enriched.K8sContext{Kind: enriched.KindPod, Namespace: fmt.Sprintf("ns-%d", n), Name: fmt.Sprintf("w%d-pod-%d", w, p),
					Workload: fmt.Sprintf("w%d", w), WorkloadKind: "Deployment", Node: fmt.Sprintf("node-%d", i%nodes)}
				addrs = append(addrs, ip.String())
				i++
			}
		}
	}
	pods := len(addrs)
	dirs := []flow.Direction{flow.DirIngress, flow.DirEgress, flow.DirBoth}
	var flows []fl
	for a, s := range addrs {
		for b, d := range addrs {
			flows = append(flows, fl{src: s, dst: d, bytes: 100, packets: 1, sampling: 1, dir: dirs[(a+b)%3], node: "node-0",
				rtt: time.Millisecond, retransmits: 1, dropP: 1, dropB: 60, cause: fmt.Sprintf("CAUSE_%d", (a*pods+b)%300),
				tcp: flow.TCPFields{TCPConnects: 3, TCPRefused: 1, TCPTimeouts: 1, TCPResets: 1, TCPZeroWindows: 1, TCPHandshake: time.Millisecond}})
		}
		// and to 10 external addresses, none in a labelled subnet
		for e := range 10 {
			flows = append(flows, fl{src: s, dst: fmt.Sprintf("203.0.113.%d", e), bytes: 1, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-1"})
		}
	}

	causes := map[string]bool{}
	run := func(t *testing.T, podLabels bool) map[string]int {
		m, err := enrich.NewMetrics(enrich.MetricsOptions{PodLabels: podLabels})
		if err != nil {
			t.Fatal(err)
		}
		p := &enrich.Pipeline{Resolver: &k8smeta.Resolver{Source: src}, Metrics: m}
		if err := p.Handle(context.Background(), batch(flows...)); err != nil {
			t.Fatal(err)
		}
		mfs, _ := m.Registry().Gather()
		for _, mf := range mfs {
			if mf.GetName() == enrich.MetricDropBytes {
				for _, m := range mf.GetMetric() {
					for _, lp := range m.GetLabel() {
						if lp.GetName() == "cause" {
							causes[lp.GetValue()] = true
						}
					}
				}
			}
			if mf.GetName() == enrich.MetricFlowBytes {
				want := "direction,dst_namespace,dst_workload,src_namespace,src_workload"
				if podLabels {
					want = "direction,dst_namespace,dst_pod,dst_workload,src_namespace,src_pod,src_workload"
				}
				if got := strings.Join(labelNames(mf), ","); got != want {
					t.Errorf("flow_bytes labels %s, want %s", got, want)
				}
			}
		}
		return seriesPerFamily(t, m)
	}

	wl := namespaces * workloads // workloads in the cluster
	t.Run("default", func(t *testing.T) {
		got := run(t, false)
		// Pod pairs collapse to workload pairs; (a+b)%3 spreads each pair
		// over the three directions. Plus workload → external, egress.
		want := map[string]int{
			enrich.MetricFlowBytes:   wl*wl*3 + wl,
			enrich.MetricFlowPackets: wl*wl*3 + wl,
			enrich.MetricNodeBytes:   nodes*nodes + nodes, // + node → ""
			// (drops: checked below)
			enrich.MetricDropPackets: got[enrich.MetricDropPackets],
			enrich.MetricDropBytes:   got[enrich.MetricDropBytes],
			enrich.MetricRTT:         namespaces * namespaces,
			enrich.MetricRetransmits: namespaces * namespaces,
			// Workload pairs, × 3 results for connects.
			enrich.MetricTCPConnects:      wl * wl * 3,
			enrich.MetricTCPResets:        wl * wl,
			enrich.MetricTCPZeroWindows:   wl * wl,
			enrich.MetricTCPHandshake:     wl * wl,
			enrich.MetricFlows:            1,
			enrich.MetricSampling:         2,
			enrich.MetricReceivedFlows:    1,
			enrich.MetricDecodeErrors:     1,
			enrich.MetricEnrichmentMisses: 2,
			// One series per flow metric that is served (none limited,
			// none expired, all 0).
			enrich.MetricSeriesLimited: 18,
			enrich.MetricSeriesExpired: 18,
		}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("%s: %d series, want %d", name, got[name], w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("families %v, want %d", got, len(want))
		}
		// Drops: at most namespace pairs × causes, and the 300 distinct
		// causes sent are bounded to MaxDropCauses + OTHER.
		if n, max := got[enrich.MetricDropPackets], namespaces*namespaces*(enrich.MaxDropCauses+1); n > max || n < namespaces*namespaces {
			t.Errorf("drop_packets: %d series, want %d..%d", n, namespaces*namespaces, max)
		}
		if n := len(causes); n != enrich.MaxDropCauses+1 || !causes[enrich.CauseOther] {
			t.Errorf("%d distinct causes (OTHER: %v), want %d", n, causes[enrich.CauseOther], enrich.MaxDropCauses+1)
		}
	})
	t.Run("pod labels", func(t *testing.T) {
		got := run(t, true)
		// One series per pod pair (each pair has one direction), plus
		// pod → external.
		if w := pods*pods + pods; got[enrich.MetricFlowBytes] != w || got[enrich.MetricFlowPackets] != w {
			t.Errorf("flow_bytes %d, flow_packets %d series, want %d", got[enrich.MetricFlowBytes], got[enrich.MetricFlowPackets], w)
		}
		// Only the flow_* metrics get pod labels.
		if got[enrich.MetricNodeBytes] != nodes*nodes+nodes || got[enrich.MetricRTT] != namespaces*namespaces ||
			got[enrich.MetricTCPConnects] != wl*wl*3 {
			t.Errorf("other families grew: %v", got)
		}
	})
}

// The allow-list keeps only the named flow metrics; health metrics stay.
func TestAllowList(t *testing.T) {
	m, err := enrich.NewMetrics(enrich.MetricsOptions{Enabled: []string{"flow_bytes_total", enrich.MetricRTT, enrich.MetricReceivedFlows}})
	if err != nil {
		t.Fatal(err)
	}
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m}
	if err := p.Handle(context.Background(), batch(known...)); err != nil {
		t.Fatal(err)
	}
	got := seriesPerFamily(t, m)
	var names []string
	for n := range got {
		names = append(names, strings.TrimPrefix(n, enrich.Prefix))
	}
	want := "decode_errors_total,enrichment_misses_total,flow_bytes_total,metric_series_expired_total,metric_series_limited_total,received_flows_total,rtt_seconds"
	if s := strings.Join(sorted(names), ","); s != want {
		t.Errorf("families %s, want %s", s, want)
	}

	none, err := enrich.NewMetrics(enrich.MetricsOptions{Enabled: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	(&enrich.Pipeline{Metrics: none}).Handle(context.Background(), batch(known...))
	if got := seriesPerFamily(t, none); len(got) != 3 || got[enrich.MetricReceivedFlows] != 1 {
		t.Errorf("no flow metrics: %v", got)
	}

	if _, err := enrich.NewMetrics(enrich.MetricsOptions{Enabled: []string{"flow_bytes"}}); err == nil {
		t.Error("unknown metric name accepted")
	}
}

func sorted(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// Without a cluster (no Source), every endpoint is external or its subnet,
// no enrichment miss is counted, and with no Resolver at all flows are not
// enriched.
func TestWithoutCluster(t *testing.T) {
	m, _ := enrich.NewMetrics(enrich.MetricsOptions{})
	subnets, _ := k8smeta.ParseSubnets("corp=172.16.0.0/12")
	var got []enriched.Flow
	p := &enrich.Pipeline{Resolver: &k8smeta.Resolver{Subnets: subnets}, Metrics: m,
		Sink: func(_ context.Context, f []enriched.Flow) error { got = f; return nil }}
	if err := p.Handle(context.Background(), batch(known[4])); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Enriched || got[0].Src != (enriched.K8sContext{Kind: enriched.KindExternal, Subnet: "corp"}) || got[0].Dst != (enriched.K8sContext{Kind: enriched.KindExternal}) {
		t.Fatalf("flows %+v", got)
	}
	want := `
# HELP flowlens_collector_flow_bytes_total Bytes of flows (L2 frame bytes counted on each flow's first interface, times its sampling rate), by source and destination namespace and workload and the direction of the counting interface.
# TYPE flowlens_collector_flow_bytes_total counter
flowlens_collector_flow_bytes_total{direction="ingress",dst_namespace="",dst_workload="external",src_namespace="",src_workload="corp"} 160
# HELP flowlens_collector_enrichment_misses_total Flow endpoints whose address is not a pod, Service or node of the cluster (enrichment on), by side.
# TYPE flowlens_collector_enrichment_misses_total counter
flowlens_collector_enrichment_misses_total{side="dst"} 0
flowlens_collector_enrichment_misses_total{side="src"} 0
`
	if err := gatherAndCompare(t, m.Registry(), strings.NewReader(want), enrich.MetricFlowBytes, enrich.MetricEnrichmentMisses); err != nil {
		t.Error(err)
	}

	got = nil
	p = &enrich.Pipeline{Sink: func(_ context.Context, f []enriched.Flow) error { got = f; return nil }}
	if err := p.Handle(context.Background(), batch(known[4])); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Enriched || got[0].Src != (enriched.K8sContext{}) {
		t.Fatalf("not enriched: %+v", got)
	}
}

// JSON: the agent's object, node_name and agent_ip, then src_k8s/dst_k8s
// when enriched; valid JSON either way.
func TestFlowJSON(t *testing.T) {
	var got []enriched.Flow
	p := &enrich.Pipeline{Resolver: resolver(t), Sink: func(_ context.Context, f []enriched.Flow) error { got = f; return nil }}
	if err := p.Handle(context.Background(), batch(known[0], known[4])); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{
		`,"node_name":"node-a","agent_ip":"192.0.2.1","src_k8s":{"kind":"pod","namespace":"shop","name":"web-1","workload":"web","workload_kind":"Deployment","node":"node-a"},"dst_k8s":{"kind":"pod","namespace":"db","name":"db-0","workload":"db","workload_kind":"StatefulSet","node":"node-b"}}`,
		`,"node_name":"node-a","agent_ip":"192.0.2.1","src_k8s":{"kind":"external","subnet":"corp"},"dst_k8s":{"kind":"service","namespace":"kube-system","name":"kube-dns","workload":"kube-dns","workload_kind":"Service"}}`,
	} {
		agent := string(got[i].Record.AppendJSON(nil))
		line := string(got[i].AppendJSON(nil))
		if line != agent[:len(agent)-1]+want {
			t.Errorf("flow %d:\n got %s\nwant %s", i, line, agent[:len(agent)-1]+want)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("flow %d: invalid JSON: %v", i, err)
		}
	}
	got[0].Enriched = false
	got[0].AgentIP = netip.Addr{}
	agent := string(got[0].Record.AppendJSON(nil))
	if line := string(got[0].AppendJSON(nil)); line != agent[:len(agent)-1]+`,"node_name":"node-a","agent_ip":""}` {
		t.Errorf("not enriched: %s", line)
	}
}

func TestSinkErrorEndsStream(t *testing.T) {
	p := &enrich.Pipeline{Sink: func(context.Context, []enriched.Flow) error { return errors.New("stdout gone") }}
	if err := p.Handle(context.Background(), batch(known[0])); err == nil {
		t.Fatal("sink error not returned")
	}
}

func TestHTTP(t *testing.T) {
	m, _ := enrich.NewMetrics(enrich.MetricsOptions{})
	var notReady error = errors.New("informers syncing")
	srv := httptest.NewServer(m.Handler(func() error { return notReady }))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "informers syncing") {
		t.Errorf("/readyz %d %q", code, body)
	}
	notReady = nil
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz when ready: %d", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "flowlens_collector_received_flows_total 0") {
		t.Errorf("/metrics %d %q", code, body)
	}
}

// xl is a flow of known (see fl) with a translation (feature xlat).
func xl(x fl, xsrc string, xsport uint16, xdst string, xdport uint16) *flowv1.Flow {
	p := x.proto()
	p.Xlat = &flowv1.Xlat{XlatSrcPort: uint32(xsport), XlatDstPort: uint32(xdport)}
	if xsrc != "" {
		p.Xlat.XlatSrcAddr = flowpb.AddrBytes(netip.MustParseAddr(xsrc))
	}
	if xdst != "" {
		p.Xlat.XlatDstAddr = flowpb.AddrBytes(netip.MustParseAddr(xdst))
	}
	return p
}

// Translated flows: bytes (scaled) and flow records by the flow's own
// endpoints, the translated destination's (the backend) and the side
// translated; untranslated flows and translations that change nothing do
// not count.
func TestTranslatedMetrics(t *testing.T) {
	m, err := enrich.NewMetrics(enrich.MetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []enriched.Flow
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m, Sink: func(_ context.Context, f []enriched.Flow) error { got = f; return nil }}
	b := &receiver.Batch{Flows: []*flowv1.Flow{
		// shop/web-1 → the kube-dns Service VIP, DNATed to db-0 (the
		// backend here), twice, sampled 1:2 the second time.
		xl(fl{src: "10.0.0.1", dst: "10.96.0.10", bytes: 100, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-a"}, "10.0.0.1", 40000, "10.0.1.1", 5353),
		xl(fl{src: "10.0.0.1", dst: "10.96.0.10", bytes: 100, packets: 1, sampling: 2, dir: flow.DirEgress, node: "node-a"}, "10.0.0.1", 40000, "10.0.1.1", 5353),
		// The reply, db-0 → web-1, un-DNATed: the source becomes the VIP.
		xl(fl{src: "10.0.1.1", dst: "10.0.0.1", bytes: 50, packets: 1, sampling: 1, dir: flow.DirIngress, node: "node-b"}, "10.96.0.10", 53, "10.0.0.1", 80),
		// web-2 → the internet, masqueraded behind node-a's address
		// (IPv4-mapped on the wire: still a translation of the source).
		xl(fl{src: "10.0.0.2", dst: "8.8.8.8", bytes: 70, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-b"}, "::ffff:192.168.0.11", 61000, "8.8.8.8", 80),
		// Both sides, destination to an address outside the cluster.
		xl(fl{src: "10.0.0.2", dst: "10.96.0.10", bytes: 10, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-b"}, "192.168.0.11", 1000, "172.16.0.5", 53),
		// A translation that changes nothing, and no translation at all.
		xl(fl{src: "10.0.0.1", dst: "10.0.1.1", bytes: 1, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-a"}, "10.0.0.1", 40000, "10.0.1.1", 80),
		known[0].proto(),
		// A partial flow (no traffic) with a translation.
		xl(fl{src: "10.0.0.1", dst: "10.96.0.10", node: "node-a", dropP: 1, dropB: 60, cause: "NO_SOCKET"}, "10.0.0.1", 40000, "10.0.1.1", 5353),
	}}
	if err := p.Handle(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP flowlens_collector_translated_bytes_total Bytes of flows conntrack NAT translated (feature xlat; times their sampling rate), by source and destination namespace and workload as seen (a Service's virtual IP: the Service), the namespace and workload of the translated destination (the backend), and the side translated (dst, src, both).
# TYPE flowlens_collector_translated_bytes_total counter
flowlens_collector_translated_bytes_total{dst_namespace="",dst_workload="external",src_namespace="shop",src_workload="web",translated="src",xlat_dst_namespace="",xlat_dst_workload="external"} 70
flowlens_collector_translated_bytes_total{dst_namespace="kube-system",dst_workload="kube-dns",src_namespace="shop",src_workload="web",translated="both",xlat_dst_namespace="",xlat_dst_workload="corp"} 10
flowlens_collector_translated_bytes_total{dst_namespace="kube-system",dst_workload="kube-dns",src_namespace="shop",src_workload="web",translated="dst",xlat_dst_namespace="db",xlat_dst_workload="db"} 300
flowlens_collector_translated_bytes_total{dst_namespace="shop",dst_workload="web",src_namespace="db",src_workload="db",translated="src",xlat_dst_namespace="shop",xlat_dst_workload="web"} 50
# HELP flowlens_collector_translated_flows_total Flow records conntrack NAT translated (feature xlat; one per flow per eviction period, not scaled), with the labels of translated_bytes_total.
# TYPE flowlens_collector_translated_flows_total counter
flowlens_collector_translated_flows_total{dst_namespace="",dst_workload="external",src_namespace="shop",src_workload="web",translated="src",xlat_dst_namespace="",xlat_dst_workload="external"} 1
flowlens_collector_translated_flows_total{dst_namespace="kube-system",dst_workload="kube-dns",src_namespace="shop",src_workload="web",translated="both",xlat_dst_namespace="",xlat_dst_workload="corp"} 1
flowlens_collector_translated_flows_total{dst_namespace="kube-system",dst_workload="kube-dns",src_namespace="shop",src_workload="web",translated="dst",xlat_dst_namespace="db",xlat_dst_workload="db"} 2
flowlens_collector_translated_flows_total{dst_namespace="shop",dst_workload="web",src_namespace="db",src_workload="db",translated="src",xlat_dst_namespace="shop",xlat_dst_workload="web"} 1
# HELP flowlens_collector_enrichment_misses_total Flow endpoints whose address is not a pod, Service or node of the cluster (enrichment on), by side.
# TYPE flowlens_collector_enrichment_misses_total counter
flowlens_collector_enrichment_misses_total{side="dst"} 1
flowlens_collector_enrichment_misses_total{side="src"} 0
`
	if err := gatherAndCompare(t, m.Registry(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	// The sink sees the translated endpoints' context, and so does the JSON.
	if len(got) != len(b.Flows) || got[0].XlatDst != db0 || got[0].XlatSrc != web1 || got[3].XlatSrc != nodeA {
		t.Fatalf("translated context: %+v / %+v / %+v", got[0].XlatSrc, got[0].XlatDst, got[3].XlatSrc)
	}
	if got[6].XlatSrc != (enriched.K8sContext{}) || got[6].XlatDst != (enriched.K8sContext{}) {
		t.Errorf("untranslated flow has translated context %+v %+v", got[6].XlatSrc, got[6].XlatDst)
	}
	agent := string(got[0].Record.AppendJSON(nil))
	line := string(got[0].AppendJSON(nil))
	if !strings.Contains(agent, `"xlat_dst_addr":"10.0.1.1","xlat_dst_port":5353`) ||
		!strings.HasSuffix(line, `,"xlat_src_k8s":{"kind":"pod","namespace":"shop","name":"web-1","workload":"web","workload_kind":"Deployment","node":"node-a"},`+
			`"xlat_dst_k8s":{"kind":"pod","namespace":"db","name":"db-0","workload":"db","workload_kind":"StatefulSet","node":"node-b"}}`) {
		t.Errorf("JSON of a translated flow:\n%s", line)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Errorf("invalid JSON: %v", err)
	}
	if line := string(got[6].AppendJSON(nil)); strings.Contains(line, "xlat") {
		t.Errorf("untranslated flow: %s", line)
	}

	// Off by the allow-list.
	off, _ := enrich.NewMetrics(enrich.MetricsOptions{Enabled: []string{"flow_bytes_total"}})
	(&enrich.Pipeline{Resolver: resolver(t), Metrics: off}).Handle(context.Background(), b)
	if n := seriesPerFamily(t, off); n[enrich.MetricTranslatedBytes] != 0 || n[enrich.MetricTranslatedFlows] != 0 {
		t.Errorf("translated metrics served when not enabled: %v", n)
	}
}

// tl is a flow of known (see fl) with TLS fields (feature tls).
func tl(x fl, version, suite, group uint16, clientHello, quic bool) *flowv1.Flow {
	p := x.proto()
	p.Tls = &flowv1.TLS{TlsVersion: uint32(version), TlsCipherSuite: uint32(suite), TlsGroup: uint32(group),
		TlsClientHello: clientHello, Quic: quic}
	return p
}

// Flows that carried a ServerHello, by negotiated version and cipher suite
// name ("other" without one) and the server (the flow's source); flows with
// only a ClientHello or QUIC, and flows without TLS, do not count.
func TestTLSMetrics(t *testing.T) {
	m, err := enrich.NewMetrics(enrich.MetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []enriched.Flow
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m, Sink: func(_ context.Context, f []enriched.Flow) error { got = f; return nil }}
	b := &receiver.Batch{Flows: []*flowv1.Flow{
		// db-0 serves web-1 TLS 1.3 twice (sampling does not scale flow
		// records), and web-2 once with TLS 1.2.
		tl(fl{src: "10.0.1.1", dst: "10.0.0.1", bytes: 4000, packets: 3, sampling: 1, dir: flow.DirEgress, node: "node-b"}, 0x0304, 0x1301, 0x001d, false, false),
		tl(fl{src: "10.0.1.1", dst: "10.0.0.1", bytes: 4000, packets: 3, sampling: 4, dir: flow.DirEgress, node: "node-b"}, 0x0304, 0x1301, 0x001d, false, false),
		tl(fl{src: "10.0.1.1", dst: "10.0.0.2", bytes: 3000, packets: 2, sampling: 1, dir: flow.DirEgress, node: "node-b"}, 0x0303, 0xc02f, 0, false, false),
		// The client's side of that handshake: a ClientHello only.
		tl(fl{src: "10.0.0.1", dst: "10.0.1.1", bytes: 600, packets: 2, sampling: 1, dir: flow.DirEgress, node: "node-a"}, 0, 0, 0, true, false),
		// A server outside the cluster (subnet corp), TLS 1.0 and an
		// unknown suite; a version nobody names.
		tl(fl{src: "172.16.0.5", dst: "10.0.0.2", bytes: 900, packets: 1, sampling: 1, dir: flow.DirIngress, node: "node-b"}, 0x0301, 0xabcd, 0, false, false),
		tl(fl{src: "8.8.8.8", dst: "10.0.0.2", bytes: 900, packets: 1, sampling: 1, dir: flow.DirIngress, node: "node-b"}, 0x7f1c, 0x1302, 0x11ec, false, false),
		// QUIC only, and no TLS at all.
		tl(fl{src: "8.8.8.8", dst: "10.0.0.1", bytes: 1200, packets: 1, sampling: 1, dir: flow.DirIngress, node: "node-a"}, 0, 0, 0, false, true),
		known[0].proto(),
	}}
	if err := p.Handle(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP flowlens_collector_tls_flows_total Flow records that carried a TLS ServerHello (feature tls; the server -> client flow of a handshake; not scaled), by negotiated version and cipher suite (IANA names, other for values without one) and the server's namespace and workload.
# TYPE flowlens_collector_tls_flows_total counter
flowlens_collector_tls_flows_total{cipher_suite="TLS_AES_128_GCM_SHA256",server_namespace="db",server_workload="db",tls_version="TLS 1.3"} 2
flowlens_collector_tls_flows_total{cipher_suite="TLS_AES_256_GCM_SHA384",server_namespace="",server_workload="external",tls_version="other"} 1
flowlens_collector_tls_flows_total{cipher_suite="TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",server_namespace="db",server_workload="db",tls_version="TLS 1.2"} 1
flowlens_collector_tls_flows_total{cipher_suite="other",server_namespace="",server_workload="corp",tls_version="TLS 1.0"} 1
`
	if err := gatherAndCompare(t, m.Registry(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	// The collector's JSON has the agent's tls_* keys (names), only on
	// flows with TLS fields.
	if len(got) != len(b.Flows) {
		t.Fatalf("%d flows at the sink", len(got))
	}
	for i, want := range map[int]string{
		0: `"tls_version":"TLS 1.3","tls_cipher_suite":"TLS_AES_128_GCM_SHA256","tls_group":"x25519","tls_client_hello":false,"quic":false`,
		3: `"tls_version":"","tls_cipher_suite":"","tls_group":"","tls_client_hello":true,"quic":false`,
		4: `"tls_version":"TLS 1.0","tls_cipher_suite":"0xabcd","tls_group":"","tls_client_hello":false,"quic":false`,
		6: `"tls_version":"","tls_cipher_suite":"","tls_group":"","tls_client_hello":false,"quic":true`,
	} {
		line := string(got[i].AppendJSON(nil))
		if !strings.Contains(line, want+`,"node_name"`) {
			t.Errorf("flow %d: JSON lacks %s:\n%s", i, want, line)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("flow %d: invalid JSON: %v", i, err)
		}
	}
	if line := string(got[7].AppendJSON(nil)); strings.Contains(line, "tls_") || strings.Contains(line, "quic") {
		t.Errorf("flow without TLS: %s", line)
	}

	// Off by the allow-list.
	off, _ := enrich.NewMetrics(enrich.MetricsOptions{Enabled: []string{"flow_bytes_total"}})
	(&enrich.Pipeline{Resolver: resolver(t), Metrics: off}).Handle(context.Background(), b)
	if n := seriesPerFamily(t, off); n[enrich.MetricTLSFlows] != 0 {
		t.Errorf("tls metric served when not enabled: %v", n)
	}
	on, _ := enrich.NewMetrics(enrich.MetricsOptions{Enabled: []string{"tls_flows_total"}})
	(&enrich.Pipeline{Resolver: resolver(t), Metrics: on}).Handle(context.Background(), b)
	if n := seriesPerFamily(t, on); n[enrich.MetricTLSFlows] != 4 || n[enrich.MetricFlowBytes] != 0 {
		t.Errorf("tls metric alone: %v", n)
	}
}

// dn is a UDP flow of known (see fl) to or from port 53 with DNS fields
// (feature dns): a query (flags without QR) goes to port 53, an answer
// comes from it.
func dn(x fl, id, flags uint16, rcode uint8, name string, latency time.Duration, timeout bool) *flowv1.Flow {
	p := x.proto()
	p.Proto = 17
	if flags&flow.DNSFlagQR != 0 {
		p.SrcPort, p.DstPort = 53, 40000
	} else {
		p.SrcPort, p.DstPort = 40000, 53
	}
	p.Dns = &flowv1.DNS{DnsId: uint32(id), DnsFlags: uint32(flags), DnsRcode: uint32(rcode), DnsName: name,
		DnsLatencyNs: uint64(latency), DnsLatencyMaxNs: uint64(latency), DnsTimeout: timeout}
	return p
}

// DNS answers by rcode name, latency and timeouts, by the client (the
// query's source; an answer's destination); queries without an answer and
// flows without DNS do not count; query names are no label.
func TestDNSMetrics(t *testing.T) {
	m, err := enrich.NewMetrics(enrich.MetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []enriched.Flow
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m, Sink: func(_ context.Context, f []enriched.Flow) error { got = f; return nil }}
	const rd, qr = flow.DNSFlagRD, flow.DNSFlagQR
	lat1, lat2 := 2*time.Millisecond, 30*time.Millisecond
	b := &receiver.Batch{Flows: []*flowv1.Flow{
		// web-1 asks kube-dns twice (sampling does not scale): NOERROR in
		// 2 ms, NXDOMAIN in 30 ms.
		dn(fl{src: "10.0.0.1", dst: "10.96.0.10", bytes: 80, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-a"}, 0x1234, rd, 0, "db.db.svc.cluster.local", lat1, false),
		dn(fl{src: "10.0.0.1", dst: "10.96.0.10", bytes: 80, packets: 1, sampling: 8, dir: flow.DirEgress, node: "node-a"}, 0x1235, rd, 3, "nope.example", lat2, false),
		// web-2's query times out.
		dn(fl{src: "10.0.0.2", dst: "10.96.0.10", bytes: 80, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-b"}, 7, rd, 0, "slow.example", 0, true),
		// An answer whose query was not seen, on the server's flow: an
		// external server's SERVFAIL to web-2, and a code above 15.
		dn(fl{src: "8.8.8.8", dst: "10.0.0.2", bytes: 120, packets: 1, sampling: 1, dir: flow.DirIngress, node: "node-b"}, 9, qr|rd|flow.DNSFlagRA|2, 2, "broken.example", 0, false),
		dn(fl{src: "8.8.8.8", dst: "10.0.0.2", bytes: 120, packets: 1, sampling: 1, dir: flow.DirIngress, node: "node-b"}, 10, qr|rd, 200, "odd.example", 0, false),
		// A client outside the cluster (subnet corp): REFUSED after 3 s.
		dn(fl{src: "172.16.0.5", dst: "10.96.0.10", bytes: 80, packets: 1, sampling: 1, dir: flow.DirIngress, node: "node-a"}, 11, rd, 5, "x.corp", 3*time.Second, false),
		// A query not answered yet (no timeout either): nothing counts.
		dn(fl{src: "10.0.1.1", dst: "10.96.0.10", bytes: 80, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-b"}, 12, rd, 0, "pending.example", 0, false),
		known[0].proto(),
	}}
	if err := p.Handle(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP flowlens_collector_dns_responses_total DNS answers seen (feature dns; one per flow record that carries one: the last answer of the flow in the eviction period; not scaled), by response code name (NOERROR, NXDOMAIN, SERVFAIL ...) and the client's namespace and workload (the query's sender; query names are not a label).
# TYPE flowlens_collector_dns_responses_total counter
flowlens_collector_dns_responses_total{client_namespace="",client_workload="corp",rcode="REFUSED"} 1
flowlens_collector_dns_responses_total{client_namespace="shop",client_workload="web",rcode="NOERROR"} 1
flowlens_collector_dns_responses_total{client_namespace="shop",client_workload="web",rcode="NXDOMAIN"} 1
flowlens_collector_dns_responses_total{client_namespace="shop",client_workload="web",rcode="SERVFAIL"} 1
flowlens_collector_dns_responses_total{client_namespace="shop",client_workload="web",rcode="other"} 1
# HELP flowlens_collector_dns_timeouts_total DNS queries left unanswered longer than the agent's --dns-timeout (feature dns; one per flow record that reports one), by the client's namespace and workload.
# TYPE flowlens_collector_dns_timeouts_total counter
flowlens_collector_dns_timeouts_total{client_namespace="shop",client_workload="web"} 1
# HELP flowlens_collector_dns_latency_seconds DNS query-to-answer latency (feature dns), observed once per flow record that reports one (its latest value in the eviction period), by the client's namespace and workload.
# TYPE flowlens_collector_dns_latency_seconds histogram
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="0.0005"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="0.001"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="0.0025"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="0.005"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="0.01"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="0.025"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="0.05"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="0.1"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="0.25"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="0.5"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="1"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="2.5"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="5"} 1
flowlens_collector_dns_latency_seconds_bucket{client_namespace="",client_workload="corp",le="+Inf"} 1
flowlens_collector_dns_latency_seconds_sum{client_namespace="",client_workload="corp"} 3
flowlens_collector_dns_latency_seconds_count{client_namespace="",client_workload="corp"} 1
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="0.0005"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="0.001"} 0
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="0.0025"} 1
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="0.005"} 1
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="0.01"} 1
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="0.025"} 1
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="0.05"} 2
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="0.1"} 2
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="0.25"} 2
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="0.5"} 2
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="1"} 2
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="2.5"} 2
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="5"} 2
flowlens_collector_dns_latency_seconds_bucket{client_namespace="shop",client_workload="web",le="+Inf"} 2
flowlens_collector_dns_latency_seconds_sum{client_namespace="shop",client_workload="web"} ` + fmt.Sprint(lat1.Seconds()+lat2.Seconds()) + `
flowlens_collector_dns_latency_seconds_count{client_namespace="shop",client_workload="web"} 2
`
	if err := gatherAndCompare(t, m.Registry(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	// The collector's JSON has the agent's dns_* keys, only on flows with
	// DNS fields.
	if len(got) != len(b.Flows) {
		t.Fatalf("%d flows at the sink", len(got))
	}
	for i, want := range map[int]string{
		1: `"dns_id":4661,"dns_flags":256,"dns_rcode":"NXDOMAIN","dns_name":"nope.example","dns_name_truncated":false,"dns_latency_ns":30000000,"dns_latency_max_ns":30000000,"dns_timeout":false`,
		2: `"dns_id":7,"dns_flags":256,"dns_rcode":"","dns_name":"slow.example","dns_name_truncated":false,"dns_latency_ns":0,"dns_latency_max_ns":0,"dns_timeout":true`,
		3: `"dns_id":9,"dns_flags":33154,"dns_rcode":"SERVFAIL","dns_name":"broken.example","dns_name_truncated":false,"dns_latency_ns":0,"dns_latency_max_ns":0,"dns_timeout":false`,
	} {
		line := string(got[i].AppendJSON(nil))
		if !strings.Contains(line, want+`,"node_name"`) {
			t.Errorf("flow %d: JSON lacks %s:\n%s", i, want, line)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("flow %d: invalid JSON: %v", i, err)
		}
	}
	if line := string(got[7].AppendJSON(nil)); strings.Contains(line, "dns_") {
		t.Errorf("flow without DNS: %s", line)
	}

	// Off by the allow-list, and each alone.
	off, _ := enrich.NewMetrics(enrich.MetricsOptions{Enabled: []string{"flow_bytes_total"}})
	(&enrich.Pipeline{Resolver: resolver(t), Metrics: off}).Handle(context.Background(), b)
	if n := seriesPerFamily(t, off); n[enrich.MetricDNSLatency]+n[enrich.MetricDNSResponses]+n[enrich.MetricDNSTimeouts] != 0 {
		t.Errorf("dns metrics served when not enabled: %v", n)
	}
	for name, series := range map[string]int{"dns_latency_seconds": 2, "dns_responses_total": 5, "dns_timeouts_total": 1} {
		on, err := enrich.NewMetrics(enrich.MetricsOptions{Enabled: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		(&enrich.Pipeline{Resolver: resolver(t), Metrics: on}).Handle(context.Background(), b)
		n := seriesPerFamily(t, on)
		if n[enrich.Prefix+name] != series || n[enrich.MetricFlowBytes] != 0 || n[enrich.MetricTLSFlows] != 0 {
			t.Errorf("%s alone: %v", name, n)
		}
	}
}

package dashboards

import "strings"

// The "flowlens / Service map" dashboard: Grafana's Node Graph panel over
// the collector's per-workload-pair series (flow_bytes_total by
// src/dst namespace and workload), for people who live in Grafana; the
// collector's own service map (docs/ui.md) draws the same from its flow
// history, with drops per edge and the flows behind each. The collector's
// drop, RTT and retransmit series are per namespace pair, so the health
// panels are too.

// workloadID makes the label l (id, source or target) "namespace/workload"
// of the namespace and workload labels ns and w: the Node Graph's node id.
func workloadID(expr, l, ns, w string) string {
	return `label_join(` + expr + `, "` + l + `", "/", "` + ns + `", "` + w + `")`
}

// pairBytes is the bytes of each workload pair over the dashboard's range.
const pairBytes = "sum by (src_namespace, src_workload, dst_namespace, dst_workload) (increase(" + flowBytes + nsFilter + "[$__range]))"

func serviceMap() spec {
	srcBytes := "sum by (src_namespace, src_workload) (increase(" + flowBytes + nsFilter + "[$__range]))"
	dstBytes := "sum by (dst_namespace, dst_workload) (increase(" + flowBytes + nsFilter + "[$__range]))"
	// Nodes: every workload on either end, its bytes sent and received
	// (the two sides have different label names, so "or" keeps both).
	nodes := "sum by (id) (" + workloadID(external(srcBytes, "src_namespace"), "id", "src_namespace", "src_workload") +
		" or " + workloadID(external(dstBytes, "dst_namespace"), "id", "dst_namespace", "dst_workload") + ")"
	// Edges: source → target, their bytes; id is "source->target".
	edges := `label_join(` + workloadID(workloadID(external(pairBytes, "src_namespace", "dst_namespace"), "source", "src_namespace", "src_workload"),
		"target", "dst_namespace", "dst_workload") + `, "id", "->", "source", "target")`
	nsBytes := "sum by (src_namespace, dst_namespace) (increase(" + flowBytes + nsFilter + "[$__range]))"
	nsNodes := "sum by (id) (" + `label_join(` + external(strings.Replace(nsBytes, "src_namespace, dst_namespace", "src_namespace", 1), "src_namespace") + `, "id", "", "src_namespace")` +
		" or " + `label_join(` + external(strings.Replace(nsBytes, "src_namespace, dst_namespace", "dst_namespace", 1), "dst_namespace") + `, "id", "", "dst_namespace")` + ")"
	// label_join of one label copies it (a label_replace's "$1" would
	// be a dashboard variable to Grafana).
	nsEdges := `label_join(label_join(label_join(` + external(nsBytes, "src_namespace", "dst_namespace") +
		`, "source", "", "src_namespace"), "target", "", "dst_namespace"), "id", "->", "source", "target")`
	workloadRate := "sum by (src_namespace, src_workload, dst_namespace, dst_workload) (" + rate(flowBytes) + ")"
	return spec{
		File: "flowlens-service-map.json", UID: "flowlens-service-map", Title: "flowlens / Service map",
		Description: "Who talks to whom: workloads and namespaces as nodes, the bytes between them as edges (Grafana's Node Graph), over the dashboard's time range; drops and retransmits per namespace pair. From flowlens-collector's flow metrics; `flowlens ui` draws the same from the collectors' history, with drops per workload edge and each edge's flows.",
		Tags:        []string{"flowlens", "network"},
		Variables:   namespaceVariables(),
		Rows: []row{
			{Title: "Map", Panels: []panel{
				{Title: "Service map (bytes over the range)", Kind: nodeGraph, Unit: "bytes", Width: 24, Height: 16,
					Description: "Nodes are workloads (namespace/workload; (external) for addresses outside the cluster), edges the bytes from one to the other over the dashboard's time range.",
					Queries: []query{
						{Legend: "nodes", Expr: nodes},
						{Legend: "edges", Expr: edges},
					}},
				{Title: "Namespace map (bytes over the range)", Kind: nodeGraph, Unit: "bytes", Width: 24, Height: 12,
					Description: "The same map grouped by namespace.",
					Queries: []query{
						{Legend: "nodes", Expr: nsNodes},
						{Legend: "edges", Expr: nsEdges},
					}},
			}},
			{Title: "Totals", Panels: []panel{
				{Title: "Talking workloads", Kind: statValue, Unit: "short", Width: 6, Height: 5,
					Description: "Workloads sending traffic in the selection now.",
					Queries:     []query{{Legend: "workloads", Expr: "count(sum by (src_namespace, src_workload) (" + rate(flowBytes) + "))"}}},
				{Title: "Workload pairs", Kind: statValue, Unit: "short", Width: 6, Height: 5,
					Description: "Edges of the service map: workload pairs with traffic in the selection now.",
					Queries:     []query{{Legend: "pairs", Expr: "count(" + workloadRate + ")"}}},
				{Title: "Namespace pairs with drops", Kind: statValue, Unit: "short", Width: 6, Height: 5,
					Description: "Namespace pairs whose flows had packets dropped by the kernel now (0 when none).",
					Queries:     []query{{Legend: "pairs", Expr: "count(sum by (src_namespace, dst_namespace) (" + rate(dropPackets) + ") > 0) or vector(0)"}}},
				{Title: "Bytes between workloads", Kind: statValue, Unit: "Bps", Width: 6, Height: 5,
					Description: "Bytes per second on all the map's edges.",
					Queries:     []query{{Legend: "bytes/s", Expr: "sum(" + rate(flowBytes) + ")"}}},
			}},
			{Title: "Edges", Panels: []panel{
				{Title: "Busiest edges", Kind: timeSeries, Unit: "Bps", Min: &zero, Width: 24,
					Description: "Bytes per second of the busiest workload pairs (the thickest edges of the map).",
					Queries: []query{{Legend: "{{src_namespace}}/{{src_workload}} → {{dst_namespace}}/{{dst_workload}}",
						Expr: external("topk($top, "+workloadRate+")", "src_namespace", "dst_namespace")}}},
				{Title: "Unhealthy namespace pairs: drops (over the range)", Kind: tableView, Unit: "short",
					Description: "Packets the kernel dropped between namespaces over the dashboard's time range, by drop reason: the red edges of the namespace map.",
					Queries: []query{{Legend: "{{src_namespace}} → {{dst_namespace}}: {{cause}}",
						Expr: external("topk($top, sum by (src_namespace, dst_namespace, cause) (increase("+dropPackets+nsFilter+"[$__range])))", "src_namespace", "dst_namespace")}}},
				{Title: "Unhealthy namespace pairs: retransmits (over the range)", Kind: tableView, Unit: "short",
					Description: "TCP segments retransmitted between namespaces over the dashboard's time range.",
					Queries: []query{{Legend: "{{src_namespace}} → {{dst_namespace}}",
						Expr: external("topk($top, sum by (src_namespace, dst_namespace) (increase("+retransmits+nsFilter+"[$__range])))", "src_namespace", "dst_namespace")}}},
			}},
		},
	}
}

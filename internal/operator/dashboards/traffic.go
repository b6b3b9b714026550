package dashboards

// Metric names of the collector's flow metrics (docs/metrics.md), the
// contract these dashboards are written against.
const (
	flowBytes       = "flowlens_collector_flow_bytes_total"
	flowPackets     = "flowlens_collector_flow_packets_total"
	nodeBytes       = "flowlens_collector_node_bytes_total"
	dropPackets     = "flowlens_collector_drop_packets_total"
	dropBytes       = "flowlens_collector_drop_bytes_total"
	rttSeconds      = "flowlens_collector_rtt_seconds"
	retransmits     = "flowlens_collector_retransmits_total"
	collectorFlows  = "flowlens_collector_flows_total"
	sampling        = "flowlens_collector_sampling"
	receivedFlows   = "flowlens_collector_received_flows_total"
	decodeErrors    = "flowlens_collector_decode_errors_total"
	enrichMisses    = "flowlens_collector_enrichment_misses_total"
	informersSynced = "flowlens_collector_informer_synced"
	translatedBytes = "flowlens_collector_translated_bytes_total"
	translatedFlows = "flowlens_collector_translated_flows_total"
	tlsFlows        = "flowlens_collector_tls_flows_total"
	dnsLatency      = "flowlens_collector_dns_latency_seconds"
	dnsResponses    = "flowlens_collector_dns_responses_total"
	dnsTimeouts     = "flowlens_collector_dns_timeouts_total"
	tcpConnects     = "flowlens_collector_tcp_connects_total"
	tcpResets       = "flowlens_collector_tcp_resets_total"
	tcpZeroWindows  = "flowlens_collector_tcp_zero_windows_total"
	tcpHandshake    = "flowlens_collector_tcp_handshake_seconds"
)

// tlsFilter selects TLS handshakes by the destination namespace variable:
// a ServerHello's flow comes from the server, which is the destination of
// the client's connection (tls_flows_total has no client labels).
const tlsFilter = `server_namespace=~"$dst_namespace"`

// tlsOld matches the versions before TLS 1.2 (the collector's names).
const tlsOld = `tls_version=~"SSL 3.0|TLS 1.0|TLS 1.1"`

// orNone makes a query grouped by label read 0, not "no data", when it has
// no series: one series labelled (no TLS) at 0. on() matches any series, so
// it is added only when expr has none.
func orNone(expr, label string) string { return orNoneNamed(expr, label, "(no TLS)") }

// orNoneNamed is orNone with the label value of the 0 series.
func orNoneNamed(expr, label, name string) string {
	return expr + ` or on() label_replace(vector(0), "` + label + `", "` + name + `", "", "")`
}

// dnsFilter selects DNS metrics by the source namespace variable: the
// client sends the queries (the dns_* metrics have only client labels).
const dnsFilter = `{client_namespace=~"$src_namespace"}`

// dnsFailed matches the answers that mean the name did not resolve.
const dnsFailed = `rcode=~"NXDOMAIN|SERVFAIL"`

// dnsRate is rate(metric{dnsFilter}[$__rate_interval]).
func dnsRate(metric string) string { return "rate(" + metric + dnsFilter + "[$__rate_interval])" }

// dnsQuantile is the q quantile of the DNS latency in the selection, 0
// rather than "no data" or NaN without answers (histogram_quantile of
// buckets that did not grow is NaN: they are kept only while answers come).
func dnsQuantile(q string) string {
	return "histogram_quantile(" + q + ", sum by (le) (" + dnsRate(dnsLatency+"_bucket") + ") and on() (sum(" + dnsRate(dnsLatency+"_count") + ") > 0)) or vector(0)"
}

// nsFilter is the label matcher of the namespace variables, for every
// metric labelled by source and destination namespace.
const nsFilter = `{src_namespace=~"$src_namespace", dst_namespace=~"$dst_namespace"}`

// rate is rate(metric{nsFilter}[$__rate_interval]).
func rate(metric string) string { return "rate(" + metric + nsFilter + "[$__rate_interval])" }

// external names the empty namespace of addresses outside the cluster in
// legends: label_replace(expr, l, "(external)", l, "") for each label l.
func external(expr string, labels ...string) string { return nameEmpty(expr, "(external)", labels...) }

// noNode names the empty node of endpoints on no node (Services, external
// addresses) in legends.
func noNode(expr string, labels ...string) string { return nameEmpty(expr, "(no node)", labels...) }

func nameEmpty(expr, name string, labels ...string) string {
	for _, l := range labels {
		expr = `label_replace(` + expr + `, "` + l + `", "` + name + `", "` + l + `", "")`
	}
	return expr
}

// namespaceVariables are the source and destination namespace selectors of
// the flow dashboards.
func namespaceVariables() []variable {
	return []variable{
		{Name: "src_namespace", Label: "Source namespace", Multi: true,
			Query:       "label_values(" + flowBytes + ", src_namespace)",
			Description: "Namespaces traffic comes from (All includes addresses outside the cluster)."},
		{Name: "dst_namespace", Label: "Destination namespace", Multi: true,
			Query:       "label_values(" + flowBytes + ", dst_namespace)",
			Description: "Namespaces traffic goes to (All includes addresses outside the cluster)."},
		{Name: "top", Label: "Top N", Custom: "5,10,20,50", Default: "10",
			Description: "How many series the top-talker panels keep."},
	}
}

var zero = 0.0

func traffic() spec {
	bytesRate := rate(flowBytes)
	pktsRate := rate(flowPackets)
	return spec{
		File: "flowlens-traffic.json", UID: "flowlens-traffic", Title: "flowlens / Traffic",
		Description: "Who talks to whom in the cluster: bytes and packets between namespaces, workloads and nodes, from flowlens-collector's flow metrics (counts scaled by the sampling rate).",
		Tags:        []string{"flowlens", "network"},
		Variables:   namespaceVariables(),
		Rows: []row{
			{Title: "Overview", Panels: []panel{
				{Title: "Throughput", Kind: statValue, Unit: "Bps", Width: 6, Height: 5,
					Description: "Bytes per second of every flow in the selection (L2 frame bytes, scaled by the sampling rate).",
					Queries:     []query{{Expr: "sum(" + bytesRate + ")", Legend: "bytes/s"}}},
				{Title: "Packet rate", Kind: statValue, Unit: "pps", Width: 6, Height: 5,
					Description: "Packets per second of every flow in the selection.",
					Queries:     []query{{Expr: "sum(" + pktsRate + ")", Legend: "packets/s"}}},
				{Title: "Flow rate", Kind: statValue, Unit: "short", Width: 6, Height: 5,
					Description: "Flow records per second received from all agents (one per flow and eviction period).",
					Queries:     []query{{Expr: "sum(rate(" + collectorFlows + "[$__rate_interval]))", Legend: "flows/s"}}},
				{Title: "Sampling (1 in N)", Kind: statValue, Unit: "short", Width: 6, Height: 5,
					Description: "Highest sampling rate of any node: the agents look at 1 packet in N and the collector scales counts by N.",
					Queries:     []query{{Expr: "max(" + sampling + ")", Legend: "sampling"}}},
			}},
			{Title: "Top talkers by namespace", Panels: []panel{
				{Title: "Top source namespaces", Kind: timeSeries, Unit: "Bps", Min: &zero,
					Description: "Namespaces sending the most bytes per second.",
					Queries: []query{{Legend: "{{src_namespace}}",
						Expr: external("topk($top, sum by (src_namespace) ("+bytesRate+"))", "src_namespace")}}},
				{Title: "Top destination namespaces", Kind: timeSeries, Unit: "Bps", Min: &zero,
					Description: "Namespaces receiving the most bytes per second.",
					Queries: []query{{Legend: "{{dst_namespace}}",
						Expr: external("topk($top, sum by (dst_namespace) ("+bytesRate+"))", "dst_namespace")}}},
				{Title: "Top namespace pairs (average over the range)", Kind: barGauge, Unit: "Bps", Width: 24, Height: 7,
					Description: "Average bytes per second between namespaces over the dashboard's time range.",
					Queries: []query{{Legend: "{{src_namespace}} → {{dst_namespace}}",
						Expr: external("topk($top, sum by (src_namespace, dst_namespace) (rate("+flowBytes+nsFilter+"[$__range])))", "src_namespace", "dst_namespace")}}},
			}},
			{Title: "Top talkers by workload", Panels: []panel{
				{Title: "Top source workloads", Kind: timeSeries, Unit: "Bps", Min: &zero,
					Description: "Workloads (Deployment, StatefulSet, DaemonSet, Job, or the subnet label of an external address) sending the most bytes per second.",
					Queries: []query{{Legend: "{{src_namespace}}/{{src_workload}}",
						Expr: external("topk($top, sum by (src_namespace, src_workload) ("+bytesRate+"))", "src_namespace")}}},
				{Title: "Top destination workloads", Kind: timeSeries, Unit: "Bps", Min: &zero,
					Description: "Workloads receiving the most bytes per second.",
					Queries: []query{{Legend: "{{dst_namespace}}/{{dst_workload}}",
						Expr: external("topk($top, sum by (dst_namespace, dst_workload) ("+bytesRate+"))", "dst_namespace")}}},
				{Title: "Top workload pairs (bytes over the range)", Kind: tableView, Unit: "bytes", Width: 24, Height: 8,
					Description: "Bytes between workloads over the dashboard's time range.",
					Queries: []query{{Legend: "{{src_workload}} → {{dst_workload}}",
						Expr: external("topk($top, sum by (src_namespace, src_workload, dst_namespace, dst_workload) (increase("+flowBytes+nsFilter+"[$__range])))", "src_namespace", "dst_namespace")}}},
			}},
			{Title: "Ingress / egress", Panels: []panel{
				{Title: "Bytes by direction", Kind: stacked, Unit: "Bps", Min: &zero,
					Description: "Bytes per second by the direction in which the counting interface saw the flow: ingress (arriving), egress (leaving), both (an interface that saw it both ways).",
					Queries:     []query{{Legend: "{{direction}}", Expr: "sum by (direction) (" + bytesRate + ")"}}},
				{Title: "Packets by direction", Kind: stacked, Unit: "pps", Min: &zero,
					Description: "Packets per second by direction.",
					Queries:     []query{{Legend: "{{direction}}", Expr: "sum by (direction) (" + pktsRate + ")"}}},
			}},
			{Title: "Nodes", Panels: []panel{
				{Title: "Node-to-node traffic", Kind: timeSeries, Unit: "Bps", Min: &zero,
					Description: "Bytes per second between nodes: the nodes of the source and destination endpoints (pods and node addresses; Services and external addresses are on no node).",
					Queries: []query{{Legend: "{{src_node}} → {{dst_node}}",
						Expr: noNode("topk($top, sum by (src_node, dst_node) (rate("+nodeBytes+"[$__rate_interval])))", "src_node", "dst_node")}}},
				{Title: "Bytes sent and received per node", Kind: timeSeries, Unit: "Bps", Min: &zero,
					Description: "Bytes per second the endpoints on each node send and receive.",
					Queries: []query{
						{Legend: "{{src_node}} sent", Expr: noNode("topk($top, sum by (src_node) (rate("+nodeBytes+"[$__rate_interval])))", "src_node")},
						{Legend: "{{dst_node}} received", Expr: noNode("topk($top, sum by (dst_node) (rate("+nodeBytes+"[$__rate_interval])))", "dst_node")},
					}},
			}},
			// Feature xlat (docs/xlat.md). Both panels read 0, not "no
			// data", when nothing is translated (agents without xlat).
			{Title: "Service translation", Panels: []panel{
				{Title: "Translated share of bytes", Kind: statValue, Unit: "percentunit", Width: 12, Height: 5,
					Description: "Share of the selection's bytes on flows whose addresses conntrack NAT rewrote (a Service's virtual IP translated to a backend, SNAT, masquerade); needs the agents' xlat feature.",
					Queries:     []query{{Legend: "translated", Expr: "(sum(" + rate(translatedBytes) + ") or vector(0)) / sum(" + bytesRate + ")"}}},
				{Title: "Translated flow rate", Kind: statValue, Unit: "short", Width: 12, Height: 5,
					Description: "Flow records per second (one per flow and eviction period) whose addresses conntrack NAT rewrote, in the selection; needs the agents' xlat feature.",
					Queries:     []query{{Legend: "flows/s", Expr: "sum(" + rate(translatedFlows) + ") or vector(0)"}}},
			}},
			// Feature tls (docs/tls.md). Every query reads 0, not "no
			// data", without handshakes (agents without tls).
			{Title: "TLS", Panels: []panel{
				{Title: "Share of TLS handshakes below 1.2", Kind: statValue, Unit: "percentunit", Width: 6, Height: 5,
					Description: "Share of the TLS handshakes (ServerHellos) to servers in the destination namespaces that negotiated SSL 3.0, TLS 1.0 or TLS 1.1; needs the agents' tls feature.",
					Queries: []query{{Legend: "below TLS 1.2",
						Expr: "sum(rate(" + tlsFlows + "{" + tlsFilter + ", " + tlsOld + "}[$__rate_interval])) / (sum(rate(" + tlsFlows + "{" + tlsFilter + "}[$__rate_interval])) > 0) or vector(0)"}}},
				{Title: "TLS handshake rate", Kind: statValue, Unit: "short", Width: 6, Height: 5,
					Description: "TLS handshakes per second (flow records that carried a ServerHello) to servers in the destination namespaces; needs the agents' tls feature.",
					Queries:     []query{{Legend: "handshakes/s", Expr: "sum(rate(" + tlsFlows + "{" + tlsFilter + "}[$__rate_interval])) or vector(0)"}}},
				{Title: "TLS handshakes by version", Kind: stacked, Unit: "short", Min: &zero, Width: 12, Height: 5,
					Description: "TLS handshakes per second by negotiated version (other: a version number without a name), to servers in the destination namespaces.",
					Queries: []query{{Legend: "{{tls_version}}",
						Expr: orNone("sum by (tls_version) (rate("+tlsFlows+"{"+tlsFilter+"}[$__rate_interval]))", "tls_version")}}},
				{Title: "TLS cipher suites (handshakes over the range)", Kind: barGauge, Unit: "short",
					Description: "Handshakes over the dashboard's time range by negotiated cipher suite (IANA name; other: a suite without one).",
					Queries: []query{{Legend: "{{cipher_suite}}",
						Expr: orNone("topk($top, sum by (cipher_suite) (increase("+tlsFlows+"{"+tlsFilter+"}[$__range])))", "cipher_suite")}}},
				{Title: "Servers negotiating TLS below 1.2 (handshakes over the range)", Kind: tableView, Unit: "short",
					Description: "Server workloads that negotiated SSL 3.0, TLS 1.0 or TLS 1.1 over the dashboard's time range, by version and cipher suite.",
					Queries: []query{{Legend: "{{server_workload}} {{tls_version}}",
						Expr: orNone(external("topk($top, sum by (server_namespace, server_workload, tls_version, cipher_suite) (increase("+tlsFlows+"{"+tlsFilter+", "+tlsOld+"}[$__range])))", "server_namespace"), "tls_version")}}},
			}},
			// Feature dns (docs/dns.md), by the client (the source
			// namespace variable). Every query reads 0, not "no data" (nor
			// NaN), without DNS answers (agents without dns).
			{Title: "DNS", Panels: []panel{
				{Title: "DNS latency p50", Kind: statValue, Unit: "s", Width: 6, Height: 5,
					Description: "Median query-to-answer latency of the DNS queries sent by clients in the source namespaces (one observation per flow and eviction period: its latest answer); needs the agents' dns feature.",
					Queries:     []query{{Legend: "p50", Expr: dnsQuantile("0.5")}}},
				{Title: "DNS latency p99", Kind: statValue, Unit: "s", Width: 6, Height: 5,
					Description: "99th percentile of the query-to-answer latency of the DNS queries sent by clients in the source namespaces; needs the agents' dns feature.",
					Queries:     []query{{Legend: "p99", Expr: dnsQuantile("0.99")}}},
				{Title: "Share of DNS answers NXDOMAIN or SERVFAIL", Kind: statValue, Unit: "percentunit", Width: 6, Height: 5,
					Description: "Share of the DNS answers to clients in the source namespaces whose response code is NXDOMAIN (no such name) or SERVFAIL (the server failed); needs the agents' dns feature.",
					Queries: []query{{Legend: "NXDOMAIN or SERVFAIL",
						Expr: "sum(rate(" + dnsResponses + `{client_namespace=~"$src_namespace", ` + dnsFailed + "}[$__rate_interval])) / (sum(" + dnsRate(dnsResponses) + ") > 0) or vector(0)"}}},
				{Title: "DNS timeouts", Kind: statValue, Unit: "short", Width: 6, Height: 5,
					Description: "DNS queries per second left unanswered longer than the agents' --dns-timeout, sent by clients in the source namespaces; needs the agents' dns feature.",
					Queries:     []query{{Legend: "timeouts/s", Expr: "sum(" + dnsRate(dnsTimeouts) + ") or vector(0)"}}},
				{Title: "DNS answers by response code", Kind: stacked, Unit: "short", Min: &zero, Width: 12, Height: 7,
					Description: "DNS answers per second to clients in the source namespaces by response code (NOERROR, NXDOMAIN, SERVFAIL, REFUSED ...).",
					Queries: []query{{Legend: "{{rcode}}",
						Expr: orNoneNamed("sum by (rcode) ("+dnsRate(dnsResponses)+")", "rcode", "(no DNS)")}}},
				{Title: "DNS latency p99 by client", Kind: timeSeries, Unit: "s", Min: &zero, Width: 12, Height: 7,
					Description: "99th percentile of the DNS query-to-answer latency by client workload (the slowest ones), in the source namespaces.",
					Queries: []query{{Legend: "{{client_namespace}}/{{client_workload}}",
						Expr: orNoneNamed(external("topk($top, histogram_quantile(0.99, sum by (le, client_namespace, client_workload) ("+dnsRate(dnsLatency+"_bucket")+")) > 0)", "client_namespace"), "client_workload", "(no DNS)")}}},
				{Title: "Clients with NXDOMAIN or SERVFAIL answers (over the range)", Kind: tableView, Unit: "short", Width: 12, Height: 7,
					Description: "Client workloads that got NXDOMAIN or SERVFAIL answers over the dashboard's time range, by response code.",
					Queries: []query{{Legend: "{{client_workload}} {{rcode}}",
						Expr: orNoneNamed(external("topk($top, sum by (client_namespace, client_workload, rcode) (increase("+dnsResponses+`{client_namespace=~"$src_namespace", `+dnsFailed+"}[$__range])))", "client_namespace"), "rcode", "(no DNS)")}}},
				{Title: "DNS timeouts by client (over the range)", Kind: barGauge, Unit: "short", Width: 12, Height: 7,
					Description: "Client workloads whose DNS queries went unanswered over the dashboard's time range.",
					Queries: []query{{Legend: "{{client_namespace}}/{{client_workload}}",
						Expr: orNoneNamed(external("topk($top, sum by (client_namespace, client_workload) (increase("+dnsTimeouts+dnsFilter+"[$__range])))", "client_namespace"), "client_workload", "(no DNS)")}}},
			}},
		},
	}
}

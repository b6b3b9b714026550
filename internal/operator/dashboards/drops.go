package dashboards

import "fmt"

// rttQuantile is the q-quantile of the RTT histogram, per the given labels
// (plus le).
func rttQuantile(q float64, by string) string {
	if by != "" {
		by = ", " + by
	}
	return fmt.Sprintf("histogram_quantile(%g, sum by (le%s) (%s))", q, by, rate(rttSeconds+"_bucket"))
}

func dropsLatency() spec {
	return spec{
		File: "flowlens-drops-latency.json", UID: "flowlens-drops-latency", Title: "flowlens / Drops & latency",
		Description: "Packets the kernel dropped, by drop reason and namespace; TCP round-trip times from the sockets' smoothed RTT; TCP connection health (failed connects, resets, zero windows, handshake latency); TCP retransmits. From flowlens-collector's flow metrics.",
		Tags:        []string{"flowlens", "network"},
		Variables:   namespaceVariables(),
		Rows: []row{
			{Title: "Overview", Panels: []panel{
				{Title: "Dropped packets", Kind: statValue, Unit: "pps", Width: 6, Height: 5,
					Description: "Packets per second the kernel dropped on flows in the selection.",
					Queries:     []query{{Legend: "drops/s", Expr: "sum(" + rate(dropPackets) + ")"}}},
				{Title: "Drop ratio", Kind: statValue, Unit: "percentunit", Width: 6, Height: 5,
					Description: "Dropped packets over packets seen, for flows in the selection (0 when nothing is dropped).",
					Queries:     []query{{Legend: "dropped", Expr: "(sum(" + rate(dropPackets) + ") or vector(0)) / sum(" + rate(flowPackets) + ")"}}},
				{Title: "TCP RTT p90", Kind: statValue, Unit: "s", Width: 6, Height: 5,
					Description: "90th percentile of the smoothed round-trip time of TCP flows in the selection.",
					Queries:     []query{{Legend: "p90", Expr: rttQuantile(0.9, "")}}},
				{Title: "TCP retransmits", Kind: statValue, Unit: "short", Width: 6, Height: 5,
					Description: "Retransmitted TCP segments per second on flows in the selection.",
					Queries:     []query{{Legend: "retransmits/s", Expr: "sum(" + rate(retransmits) + ")"}}},
			}},
			{Title: "Drops", Panels: []panel{
				{Title: "Dropped packets by cause", Kind: stacked, Unit: "pps", Min: &zero,
					Description: "Packets per second dropped, by the kernel's drop reason (NO_SOCKET: nothing listens; NETFILTER_DROP: a firewall rule; ...).",
					Queries:     []query{{Legend: "{{cause}}", Expr: "sum by (cause) (" + rate(dropPackets) + ")"}}},
				{Title: "Dropped bytes by cause", Kind: stacked, Unit: "Bps", Min: &zero,
					Description: "Bytes per second dropped, by drop reason.",
					Queries:     []query{{Legend: "{{cause}}", Expr: "sum by (cause) (" + rate(dropBytes) + ")"}}},
				{Title: "Dropped packets by namespace pair and cause (over the range)", Kind: barGauge, Unit: "short", Width: 24, Height: 7,
					Description: "Packets dropped between namespaces over the dashboard's time range, by drop reason.",
					Queries: []query{{Legend: "{{src_namespace}} → {{dst_namespace}}: {{cause}}",
						Expr: external("topk($top, sum by (src_namespace, dst_namespace, cause) (increase("+dropPackets+nsFilter+"[$__range])))", "src_namespace", "dst_namespace")}}},
			}},
			{Title: "TCP latency", Panels: []panel{
				{Title: "TCP RTT percentiles", Kind: timeSeries, Unit: "s", Min: &zero,
					Description: "p50, p90 and p99 of the smoothed round-trip time (srtt) of TCP flows, from the collector's RTT histogram.",
					Queries: []query{
						{Legend: "p50", Expr: rttQuantile(0.5, "")},
						{Legend: "p90", Expr: rttQuantile(0.9, "")},
						{Legend: "p99", Expr: rttQuantile(0.99, "")},
					}},
				{Title: "TCP RTT p99 by namespace pair", Kind: timeSeries, Unit: "s", Min: &zero,
					Description: "99th percentile of the smoothed round-trip time between namespaces.",
					Queries: []query{{Legend: "{{src_namespace}} → {{dst_namespace}}",
						Expr: external(rttQuantile(0.99, "src_namespace, dst_namespace"), "src_namespace", "dst_namespace")}}},
				{Title: "TCP mean RTT by namespace pair", Kind: timeSeries, Unit: "s", Min: &zero, Width: 24,
					Description: "Mean smoothed round-trip time between namespaces (histogram sum over count).",
					Queries: []query{{Legend: "{{src_namespace}} → {{dst_namespace}}",
						Expr: external("sum by (src_namespace, dst_namespace) ("+rate(rttSeconds+"_sum")+") / sum by (src_namespace, dst_namespace) ("+rate(rttSeconds+"_count")+")", "src_namespace", "dst_namespace")}}},
			}},
			tcpHealth(),
			{Title: "TCP retransmits", Panels: []panel{
				{Title: "Retransmits by namespace pair", Kind: timeSeries, Unit: "short", Min: &zero,
					Description: "Retransmitted TCP segments per second between namespaces: loss or congestion on the path.",
					Queries: []query{{Legend: "{{src_namespace}} → {{dst_namespace}}",
						Expr: external("topk($top, sum by (src_namespace, dst_namespace) ("+rate(retransmits)+"))", "src_namespace", "dst_namespace")}}},
				{Title: "Retransmits over the range", Kind: barGauge, Unit: "short",
					Description: "Retransmitted TCP segments between namespaces over the dashboard's time range.",
					Queries: []query{{Legend: "{{src_namespace}} → {{dst_namespace}}",
						Expr: external("topk($top, sum by (src_namespace, dst_namespace) (increase("+retransmits+nsFilter+"[$__range])))", "src_namespace", "dst_namespace")}}},
			}},
		},
	}
}

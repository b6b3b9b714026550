package dashboards

// The TCP health row (feature tcp, docs/tcp.md): connects that failed,
// resets, zero windows and handshake latency by workload pair. Every query
// reads 0, not "no data" (nor NaN on idle series), without tcp metrics
// (agents without the feature): the grouped ones then show one series
// "(no TCP)" at 0.

// tcpFailed selects the connects that failed (refused, timeout).
const tcpFailed = `result!="established"`

// tcpPair are the labels of a workload pair, the tcp metrics' labels.
const tcpPair = "src_namespace, src_workload, dst_namespace, dst_workload"

// tcpPairLegend names a workload pair in legends.
const tcpPairLegend = "{{src_namespace}}/{{src_workload}} → {{dst_namespace}}/{{dst_workload}}"

// tcpFailedRate is the failed connects' rate(...{nsFilter, failed}).
const tcpFailedRate = "rate(" + tcpConnects + `{src_namespace=~"$src_namespace", dst_namespace=~"$dst_namespace", ` + tcpFailed + "}[$__rate_interval])"

// tcpHandshakeQuantile is the q quantile of the handshake latency, by the
// labels by (plus le), kept only while connects are answered.
func tcpHandshakeQuantile(q, by string) string {
	if by == "" {
		return "histogram_quantile(" + q + ", sum by (le) (" + rate(tcpHandshake+"_bucket") + ") and on() (sum(" + rate(tcpHandshake+"_count") + ") > 0)) or vector(0)"
	}
	return "histogram_quantile(" + q + ", sum by (le, " + by + ") (" + rate(tcpHandshake+"_bucket") + ")) > 0"
}

// tcpByPair is the top pairs of sum by (pair) (expr), external ends named,
// or one "(no TCP)" series at 0.
func tcpByPair(expr string) string {
	return orNoneNamed(external("topk($top, "+expr+")", "src_namespace", "dst_namespace"), "src_workload", "(no TCP)")
}

func tcpHealth() row {
	return row{Title: "TCP health", Panels: []panel{
		{Title: "Failed TCP connects", Kind: statValue, Unit: "short", Width: 6, Height: 5,
			Description: "TCP connection attempts per second that failed, refused (answered by a RST) or timed out (abandoned without an answer), by clients in the selection; needs the agents' tcp feature.",
			Queries:     []query{{Legend: "failed/s", Expr: "sum(" + tcpFailedRate + ") or vector(0)"}}},
		{Title: "Share of TCP connects failed", Kind: statValue, Unit: "percentunit", Width: 6, Height: 5,
			Description: "Failed TCP connects over all connects (established, refused, timed out) in the selection; needs the agents' tcp feature.",
			Queries:     []query{{Legend: "failed", Expr: "sum(" + tcpFailedRate + ") / (sum(" + rate(tcpConnects) + ") > 0) or vector(0)"}}},
		{Title: "TCP handshake p99", Kind: statValue, Unit: "s", Width: 6, Height: 5,
			Description: "99th percentile of the SYN to SYN-ACK latency of the clients' connects in the selection (a second or more: SYNs retransmitted); needs the agents' tcp feature.",
			Queries:     []query{{Legend: "p99", Expr: tcpHandshakeQuantile("0.99", "")}}},
		{Title: "TCP resets", Kind: statValue, Unit: "short", Width: 6, Height: 5,
			Description: "TCP RST segments per second sent by endpoints in the source namespaces (refused connects, aborted connections); needs the agents' tcp feature.",
			Queries:     []query{{Legend: "resets/s", Expr: "sum(" + rate(tcpResets) + ") or vector(0)"}}},
		{Title: "Failed TCP connects by workload pair", Kind: timeSeries, Unit: "short", Min: &zero,
			Description: "TCP connects per second that failed, by client and server workload and result (refused, timeout): who cannot reach whom, and how. flowlens observe --tcp-failed shows the flows.",
			Queries: []query{{Legend: tcpPairLegend + " {{result}}",
				Expr: tcpByPair("sum by (" + tcpPair + ", result) (" + tcpFailedRate + ")")}}},
		{Title: "TCP handshake p99 by workload pair", Kind: timeSeries, Unit: "s", Min: &zero,
			Description: "99th percentile of the SYN to SYN-ACK latency by client and server workload (the slowest pairs).",
			Queries: []query{{Legend: tcpPairLegend,
				Expr: tcpByPair(tcpHandshakeQuantile("0.99", tcpPair))}}},
		{Title: "TCP resets by workload pair", Kind: timeSeries, Unit: "short", Min: &zero,
			Description: "TCP RST segments per second by the sender's workload (the source) and its peer.",
			Queries: []query{{Legend: tcpPairLegend,
				Expr: tcpByPair("sum by (" + tcpPair + ") (" + rate(tcpResets) + ")")}}},
		{Title: "TCP zero windows by workload pair", Kind: timeSeries, Unit: "short", Min: &zero,
			Description: "Segments per second advertising a zero receive window, by the sender's workload (a receiver that does not read as fast as its peer sends) and its peer.",
			Queries: []query{{Legend: tcpPairLegend,
				Expr: tcpByPair("sum by (" + tcpPair + ") (" + rate(tcpZeroWindows) + ")")}}},
	}}
}

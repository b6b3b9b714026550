package dashboards_test

import (
	"strconv"
	"testing"
)

// The TCP health row's queries (feature tcp, Drops & latency dashboard),
// evaluated by promtool test rules like the DNS row's: 0 rather than "no
// data" (or NaN) without tcp metrics, with failures only, and with idle
// series; the rates, the failed share, the handshake quantiles and the
// (external) workload pairs with traffic.
func TestTCPRowValues(t *testing.T) {
	expr := dashboardRowExprs(t, "flowlens-drops-latency.json", "TCP health")
	const (
		failed      = "Failed TCP connects"
		share       = "Share of TCP connects failed"
		p99         = "TCP handshake p99"
		resets      = "TCP resets"
		failedPairs = "Failed TCP connects by workload pair"
		p99Pairs    = "TCP handshake p99 by workload pair"
		resetPairs  = "TCP resets by workload pair"
		zwPairs     = "TCP zero windows by workload pair"
	)
	if len(expr) != 8 {
		t.Fatalf("TCP health row panels: %v", expr)
	}
	const (
		conn    = "flowlens_collector_tcp_connects_total"
		rst     = "flowlens_collector_tcp_resets_total"
		zw      = "flowlens_collector_tcp_zero_windows_total"
		hs      = "flowlens_collector_tcp_handshake_seconds"
		webDB   = `src_namespace="shop",src_workload="web",dst_namespace="db",dst_workload="db"`
		dbWeb   = `src_namespace="db",src_workload="db",dst_namespace="shop",dst_workload="web"`
		corpWeb = `src_namespace="",src_workload="corp",dst_namespace="shop",dst_workload="web"`
		// corpWeb as the legends name it.
		corpWebNamed = `src_namespace="(external)",src_workload="corp",dst_namespace="shop",dst_workload="web"`
		none         = `{src_workload="(no TCP)"}`
	)
	// handshakes is the histogram of a pair: perMin answered connects a
	// minute, all in the bucket ending at le (the collector's buckets);
	// idle: series that stopped growing.
	les := []string{"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.1", "0.25", "1", "3", "+Inf"}
	grow := func(n int, idle bool) string {
		if idle {
			return strconv.Itoa(n) + "x20"
		}
		return "0+" + strconv.Itoa(n) + "x20"
	}
	handshakes := func(pair, le string, perMin int, idle bool) []promSeries {
		var out []promSeries
		in := false
		for _, b := range les {
			in = in || b == le
			n := 0
			if in {
				n = perMin
			}
			out = append(out, promSeries{hs + `_bucket{` + pair + `,le="` + b + `"}`, grow(n, idle)})
		}
		return append(out, promSeries{hs + `_count{` + pair + `}`, grow(perMin, idle)})
	}
	traffic := func(idle bool) []promSeries {
		// web → db: 2 established, 1 refused, 0.5 timed out a second,
		// answered within (0.5 ms, 1 ms]; corp (outside) → web: 0.5
		// refused a second; db sends 1 RST and 0.2 zero windows a second.
		s := handshakes(webDB, "0.001", 120, idle)
		return append(s,
			promSeries{conn + `{` + webDB + `,result="established"}`, grow(120, idle)},
			promSeries{conn + `{` + webDB + `,result="refused"}`, grow(60, idle)},
			promSeries{conn + `{` + webDB + `,result="timeout"}`, grow(30, idle)},
			promSeries{conn + `{` + corpWeb + `,result="refused"}`, grow(30, idle)},
			promSeries{rst + `{` + dbWeb + `}`, grow(60, idle)},
			promSeries{zw + `{` + dbWeb + `}`, grow(12, idle)})
	}
	c := func(title string, s ...promSample) promExprTest { return promExprTest{expr[title], "15m", s} }
	zeros := func() []promExprTest {
		return []promExprTest{c(failed, promSample{"{}", 0}), c(share, promSample{"{}", 0}), c(p99, promSample{"{}", 0}),
			c(p99Pairs, promSample{none, 0})}
	}
	tests := []promTest{
		// No tcp metrics (agents without tcp): every query reads 0.
		{"1m", []promSeries{{"flowlens_collector_flows_total", "0+60x20"}}, append(zeros(),
			c(resets, promSample{"{}", 0}),
			c(failedPairs, promSample{none, 0}), c(resetPairs, promSample{none, 0}), c(zwPairs, promSample{none, 0}),
		)},
		{"1m", traffic(false), []promExprTest{
			// 2 of 4 connects a second failed; p99 0.99 of the way
			// through (0.5 ms, 1 ms].
			c(failed, promSample{"{}", 2}), c(share, promSample{"{}", 0.5}),
			c(p99, promSample{"{}", 0.000995}), c(resets, promSample{"{}", 1}),
			c(failedPairs, promSample{`{` + webDB + `,result="refused"}`, 1}, promSample{`{` + webDB + `,result="timeout"}`, 0.5},
				promSample{`{` + corpWebNamed + `,result="refused"}`, 0.5}),
			c(p99Pairs, promSample{`{` + webDB + `}`, 0.000995}),
			c(resetPairs, promSample{`{` + dbWeb + `}`, 1}),
			c(zwPairs, promSample{`{` + dbWeb + `}`, 0.2}),
		}},
		// Only refusals (nothing answered): no handshake latency.
		{"1m", []promSeries{{conn + `{` + webDB + `,result="refused"}`, "0+60x20"}}, []promExprTest{
			c(failed, promSample{"{}", 1}), c(share, promSample{"{}", 1}), c(p99, promSample{"{}", 0}),
			c(p99Pairs, promSample{none, 0}), c(resets, promSample{"{}", 0}),
			c(failedPairs, promSample{`{` + webDB + `,result="refused"}`, 1}),
		}},
		// Series that stopped growing: 0, not NaN.
		{"1m", traffic(true), append(zeros(),
			c(resets, promSample{"{}", 0}),
			c(failedPairs, promSample{`{` + webDB + `,result="refused"}`, 0}, promSample{`{` + webDB + `,result="timeout"}`, 0},
				promSample{`{` + corpWebNamed + `,result="refused"}`, 0}),
			c(resetPairs, promSample{`{` + dbWeb + `}`, 0}),
			c(zwPairs, promSample{`{` + dbWeb + `}`, 0}),
		)},
	}
	runPromtool(t, tests)
}

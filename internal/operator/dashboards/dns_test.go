package dashboards_test

import (
	"strconv"
	"testing"
)

// The DNS row's queries (feature dns), evaluated by promtool test rules
// like the TLS row's (TestTLSRowValues): 0 rather than "no data" (or NaN)
// without answers, with timeouts only, and with idle series; the
// quantiles, the failure share, the rates and the (external) client names
// with answers.
func TestDNSRowValues(t *testing.T) {
	expr := rowExprs(t, "DNS")
	const (
		p50      = "DNS latency p50"
		p99      = "DNS latency p99"
		share    = "Share of DNS answers NXDOMAIN or SERVFAIL"
		timeouts = "DNS timeouts"
		byRcode  = "DNS answers by response code"
		byClient = "DNS latency p99 by client"
		failing  = "Clients with NXDOMAIN or SERVFAIL answers (over the range)"
		toClient = "DNS timeouts by client (over the range)"
	)
	if len(expr) != 8 {
		t.Fatalf("DNS row panels: %v", expr)
	}
	const (
		lat  = "flowlens_collector_dns_latency_seconds"
		resp = "flowlens_collector_dns_responses_total"
		tout = "flowlens_collector_dns_timeouts_total"
		web  = `client_namespace="shop",client_workload="web"`
		corp = `client_namespace="",client_workload="corp"`
	)
	// histogram is the classic histogram series of one client: perMin
	// answers a minute, all in the bucket ending at le (the
	// collector's buckets); values "" : series that stopped growing.
	les := []string{"0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "+Inf"}
	histogram := func(client, le string, perMin int, idle bool) []promSeries {
		var out []promSeries
		in := false
		grow := func(n int) string {
			if idle {
				return strconv.Itoa(n) + "x20"
			}
			return "0+" + strconv.Itoa(n) + "x20"
		}
		for _, b := range les {
			in = in || b == le
			n := 0
			if in {
				n = perMin
			}
			out = append(out, promSeries{lat + `_bucket{` + client + `,le="` + b + `"}`, grow(n)})
		}
		return append(out, promSeries{lat + `_count{` + client + `}`, grow(perMin)})
	}
	c := func(title string, s ...promSample) promExprTest { return promExprTest{expr[title], "15m", s} }
	zeros := func() []promExprTest {
		return []promExprTest{
			c(p50, promSample{"{}", 0}), c(p99, promSample{"{}", 0}), c(share, promSample{"{}", 0}),
			c(byClient, promSample{`{client_workload="(no DNS)"}`, 0}),
		}
	}

	// Answers: web 3 a second within (1 ms, 2.5 ms], corp 1 a second
	// within (2.5 s, 5 s]. web: 2 NOERROR and 1 NXDOMAIN a second, half a
	// timeout a second; corp: 1 SERVFAIL a second.
	busy := append(histogram(web, "0.0025", 180, false), histogram(corp, "5", 60, false)...)
	busy = append(busy,
		promSeries{resp + `{rcode="NOERROR",` + web + `}`, "0+120x20"},
		promSeries{resp + `{rcode="NXDOMAIN",` + web + `}`, "0+60x20"},
		promSeries{resp + `{rcode="SERVFAIL",` + corp + `}`, "0+60x20"},
		promSeries{tout + `{` + web + `}`, "0+30x20"})
	idle := append(histogram(web, "0.0025", 180, true), histogram(corp, "5", 60, true)...)
	idle = append(idle, promSeries{resp + `{rcode="NXDOMAIN",` + web + `}`, "7x20"}, promSeries{tout + `{` + web + `}`, "3x20"})

	tests := []promTest{
		// No DNS at all (agents without dns): every query reads 0.
		{"1m", []promSeries{{"flowlens_collector_flows_total", "0+60x20"}}, append(zeros(),
			c(timeouts, promSample{"{}", 0}),
			c(byRcode, promSample{`{rcode="(no DNS)"}`, 0}),
			c(failing, promSample{`{rcode="(no DNS)"}`, 0}),
			c(toClient, promSample{`{client_workload="(no DNS)"}`, 0}),
		)},
		{"1m", busy, []promExprTest{
			// 4 answers a second: the 2nd in web's bucket (2 of 3 through
			// 1..2.5 ms), the 3.96th in corp's (0.96 through 2.5..5 s).
			c(p50, promSample{"{}", 0.002}), c(p99, promSample{"{}", 4.9}),
			c(share, promSample{"{}", 0.5}), c(timeouts, promSample{"{}", 0.5}),
			c(byRcode, promSample{`{rcode="NOERROR"}`, 2}, promSample{`{rcode="NXDOMAIN"}`, 1}, promSample{`{rcode="SERVFAIL"}`, 1}),
			c(byClient, promSample{`{client_namespace="shop",client_workload="web"}`, 0.002485},
				promSample{`{client_namespace="(external)",client_workload="corp"}`, 4.975}),
			c(failing, promSample{`{client_namespace="shop",client_workload="web",rcode="NXDOMAIN"}`, 600},
				promSample{`{client_namespace="(external)",client_workload="corp",rcode="SERVFAIL"}`, 600}),
			c(toClient, promSample{`{client_namespace="shop",client_workload="web"}`, 300}),
		}},
		// Only timeouts, no answer: no latency, no share.
		{"1m", []promSeries{{tout + `{` + web + `}`, "0+60x20"}}, append(zeros(),
			c(timeouts, promSample{"{}", 1}),
			c(failing, promSample{`{rcode="(no DNS)"}`, 0}),
		)},
		// Series that stopped growing: 0, not NaN.
		{"1m", idle, append(zeros(),
			c(timeouts, promSample{"{}", 0}),
			c(failing, promSample{`{client_namespace="shop",client_workload="web",rcode="NXDOMAIN"}`, 0}),
		)},
	}
	runPromtool(t, tests)
}

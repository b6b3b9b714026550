package dashboards_test

import "testing"

// The TLS row's queries (feature tls), evaluated by Prometheus's own rule
// tester (promtool test rules, from the Prometheus `make test` installs):
// 0 rather than "no data" without handshakes, without old versions, and
// with idle series (no NaN); the values, the share and the (external) name
// with handshakes. test/dashboards checks every panel on a live run; this
// checks the values without root.
func TestTLSRowValues(t *testing.T) {
	expr := rowExprs(t, "TLS")
	const (
		share   = "Share of TLS handshakes below 1.2"
		rate    = "TLS handshake rate"
		byVer   = "TLS handshakes by version"
		suites  = "TLS cipher suites (handshakes over the range)"
		servers = "Servers negotiating TLS below 1.2 (handshakes over the range)"
	)
	if len(expr) != 5 {
		t.Fatalf("TLS row panels: %v", expr)
	}
	const metric = "flowlens_collector_tls_flows_total"
	tls13 := metric + `{tls_version="TLS 1.3",cipher_suite="TLS_AES_128_GCM_SHA256",server_namespace="db",server_workload="db"}`
	tls10 := metric + `{tls_version="TLS 1.0",cipher_suite="TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",server_namespace="",server_workload="corp"}`
	c := func(title string, s ...promSample) promExprTest { return promExprTest{expr[title], "15m", s} }
	tests := []promTest{
		// No handshakes at all (agents without tls): every query reads 0.
		{"1m", []promSeries{{"flowlens_collector_flows_total", "0+60x20"}}, []promExprTest{
			c(share, promSample{"{}", 0}), c(rate, promSample{"{}", 0}),
			c(byVer, promSample{`{tls_version="(no TLS)"}`, 0}), c(suites, promSample{`{cipher_suite="(no TLS)"}`, 0}),
			c(servers, promSample{`{tls_version="(no TLS)"}`, 0}),
		}},
		// 3 TLS 1.3 handshakes a second to db, 1 TLS 1.0 to an external server.
		{"1m", []promSeries{{tls13, "0+180x20"}, {tls10, "0+60x20"}}, []promExprTest{
			c(share, promSample{"{}", 0.25}), c(rate, promSample{"{}", 4}),
			c(byVer, promSample{`{tls_version="TLS 1.3"}`, 3}, promSample{`{tls_version="TLS 1.0"}`, 1}),
			c(suites, promSample{`{cipher_suite="TLS_AES_128_GCM_SHA256"}`, 1800}, promSample{`{cipher_suite="TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"}`, 600}),
			c(servers, promSample{`{server_namespace="(external)",server_workload="corp",tls_version="TLS 1.0",cipher_suite="TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"}`, 600}),
		}},
		// TLS 1.3 only: nothing below 1.2.
		{"1m", []promSeries{{tls13, "0+180x20"}}, []promExprTest{
			c(share, promSample{"{}", 0}), c(servers, promSample{`{tls_version="(no TLS)"}`, 0}),
		}},
		// Series that stopped growing: 0, not NaN.
		{"1m", []promSeries{{tls13, "5x20"}, {tls10, "7x20"}}, []promExprTest{c(share, promSample{"{}", 0})}},
	}
	runPromtool(t, tests)
}

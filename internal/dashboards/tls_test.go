package dashboards_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/flowlens/flowlens/internal/dashboards"
)

// The TLS row's queries (feature tls), evaluated by Prometheus's own rule
// tester (promtool test rules, from the Prometheus `make test` installs):
// 0 rather than "no data" without handshakes, without old versions, and
// with idle series (no NaN); the values, the share and the (external) name
// with handshakes. test/dashboards checks every panel on a live run; this
// checks the values without root.
func TestTLSRowValues(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (make deps-prometheus)")
	}
	m, err := dashboards.Parse(committed(t)["flowlens-traffic.json"])
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"__rate_interval": "2m", "__range": "10m", "top": "10", "src_namespace": ".*", "dst_namespace": ".*"}
	expr := map[string]string{}
	for _, p := range m.Panels {
		if p.Row != "TLS" {
			continue
		}
		if len(p.Targets) != 1 {
			t.Fatalf("panel %q: %d queries", p.Title, len(p.Targets))
		}
		e, err := dashboards.Expand(p.Targets[0].Expr, vars)
		if err != nil {
			t.Fatal(err)
		}
		expr[p.Title] = e
	}
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
	type sample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	type exprTest struct {
		Expr     string   `json:"expr"`
		EvalTime string   `json:"eval_time"`
		Samples  []sample `json:"exp_samples"`
	}
	type series struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	type test struct {
		Interval string     `json:"interval"`
		Input    []series   `json:"input_series"`
		Exprs    []exprTest `json:"promql_expr_test"`
	}
	c := func(title string, s ...sample) exprTest { return exprTest{expr[title], "15m", s} }
	tests := []test{
		// No handshakes at all (agents without tls): every query reads 0.
		{"1m", []series{{"flowlens_collector_flows_total", "0+60x20"}}, []exprTest{
			c(share, sample{"{}", 0}), c(rate, sample{"{}", 0}),
			c(byVer, sample{`{tls_version="(no TLS)"}`, 0}), c(suites, sample{`{cipher_suite="(no TLS)"}`, 0}),
			c(servers, sample{`{tls_version="(no TLS)"}`, 0}),
		}},
		// 3 TLS 1.3 handshakes a second to db, 1 TLS 1.0 to an external server.
		{"1m", []series{{tls13, "0+180x20"}, {tls10, "0+60x20"}}, []exprTest{
			c(share, sample{"{}", 0.25}), c(rate, sample{"{}", 4}),
			c(byVer, sample{`{tls_version="TLS 1.3"}`, 3}, sample{`{tls_version="TLS 1.0"}`, 1}),
			c(suites, sample{`{cipher_suite="TLS_AES_128_GCM_SHA256"}`, 1800}, sample{`{cipher_suite="TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"}`, 600}),
			c(servers, sample{`{server_namespace="(external)",server_workload="corp",tls_version="TLS 1.0",cipher_suite="TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"}`, 600}),
		}},
		// TLS 1.3 only: nothing below 1.2.
		{"1m", []series{{tls13, "0+180x20"}}, []exprTest{
			c(share, sample{"{}", 0}), c(servers, sample{`{tls_version="(no TLS)"}`, 0}),
		}},
		// Series that stopped growing: 0, not NaN.
		{"1m", []series{{tls13, "5x20"}, {tls10, "7x20"}}, []exprTest{c(share, sample{"{}", 0})}},
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), []byte("groups: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(map[string]any{"rule_files": []string{"rules.yml"}, "evaluation_interval": "1m", "tests": tests})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yml"), js, 0o644); err != nil { // JSON is YAML
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

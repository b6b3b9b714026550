package dashboards_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/flowlens/flowlens/internal/dashboards"
)

// The DNS row's queries (feature dns), evaluated by promtool test rules
// like the TLS row's (TestTLSRowValues): 0 rather than "no data" (or NaN)
// without answers, with timeouts only, and with idle series; the
// quantiles, the failure share, the rates and the (external) client names
// with answers.
func TestDNSRowValues(t *testing.T) {
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
		if p.Row != "DNS" {
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
	// histogram is the classic histogram series of one client: perMin
	// answers a minute, all in the bucket ending at le (the
	// collector's buckets); values "" : series that stopped growing.
	les := []string{"0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "+Inf"}
	histogram := func(client, le string, perMin int, idle bool) []series {
		var out []series
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
			out = append(out, series{lat + `_bucket{` + client + `,le="` + b + `"}`, grow(n)})
		}
		return append(out, series{lat + `_count{` + client + `}`, grow(perMin)})
	}
	c := func(title string, s ...sample) exprTest { return exprTest{expr[title], "15m", s} }
	zeros := func() []exprTest {
		return []exprTest{
			c(p50, sample{"{}", 0}), c(p99, sample{"{}", 0}), c(share, sample{"{}", 0}),
			c(byClient, sample{`{client_workload="(no DNS)"}`, 0}),
		}
	}

	// Answers: web 3 a second within (1 ms, 2.5 ms], corp 1 a second
	// within (2.5 s, 5 s]. web: 2 NOERROR and 1 NXDOMAIN a second, half a
	// timeout a second; corp: 1 SERVFAIL a second.
	busy := append(histogram(web, "0.0025", 180, false), histogram(corp, "5", 60, false)...)
	busy = append(busy,
		series{resp + `{rcode="NOERROR",` + web + `}`, "0+120x20"},
		series{resp + `{rcode="NXDOMAIN",` + web + `}`, "0+60x20"},
		series{resp + `{rcode="SERVFAIL",` + corp + `}`, "0+60x20"},
		series{tout + `{` + web + `}`, "0+30x20"})
	idle := append(histogram(web, "0.0025", 180, true), histogram(corp, "5", 60, true)...)
	idle = append(idle, series{resp + `{rcode="NXDOMAIN",` + web + `}`, "7x20"}, series{tout + `{` + web + `}`, "3x20"})

	tests := []test{
		// No DNS at all (agents without dns): every query reads 0.
		{"1m", []series{{"flowlens_collector_flows_total", "0+60x20"}}, append(zeros(),
			c(timeouts, sample{"{}", 0}),
			c(byRcode, sample{`{rcode="(no DNS)"}`, 0}),
			c(failing, sample{`{rcode="(no DNS)"}`, 0}),
			c(toClient, sample{`{client_workload="(no DNS)"}`, 0}),
		)},
		{"1m", busy, []exprTest{
			// 4 answers a second: the 2nd in web's bucket (2 of 3 through
			// 1..2.5 ms), the 3.96th in corp's (0.96 through 2.5..5 s).
			c(p50, sample{"{}", 0.002}), c(p99, sample{"{}", 4.9}),
			c(share, sample{"{}", 0.5}), c(timeouts, sample{"{}", 0.5}),
			c(byRcode, sample{`{rcode="NOERROR"}`, 2}, sample{`{rcode="NXDOMAIN"}`, 1}, sample{`{rcode="SERVFAIL"}`, 1}),
			c(byClient, sample{`{client_namespace="shop",client_workload="web"}`, 0.002485},
				sample{`{client_namespace="(external)",client_workload="corp"}`, 4.975}),
			c(failing, sample{`{client_namespace="shop",client_workload="web",rcode="NXDOMAIN"}`, 600},
				sample{`{client_namespace="(external)",client_workload="corp",rcode="SERVFAIL"}`, 600}),
			c(toClient, sample{`{client_namespace="shop",client_workload="web"}`, 300}),
		}},
		// Only timeouts, no answer: no latency, no share.
		{"1m", []series{{tout + `{` + web + `}`, "0+60x20"}}, append(zeros(),
			c(timeouts, sample{"{}", 1}),
			c(failing, sample{`{rcode="(no DNS)"}`, 0}),
		)},
		// Series that stopped growing: 0, not NaN.
		{"1m", idle, append(zeros(),
			c(timeouts, sample{"{}", 0}),
			c(failing, sample{`{client_namespace="shop",client_workload="web",rcode="NXDOMAIN"}`, 0}),
		)},
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

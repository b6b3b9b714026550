package dashboards_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/flowlens/flowlens/internal/operator/dashboards"
)

// The row value tests (TestTLSRowValues, TestDNSRowValues...) evaluate a
// dashboard row's queries with Prometheus's own rule tester, promtool test
// rules (from the Prometheus `make test` installs), on input series they
// write: the values, and 0 rather than "no data" or NaN. test/dashboards
// checks every panel on a live run; these check the values without root.

// promSample, promExprTest, promSeries and promTest are promtool's test
// file, in JSON (which is YAML).
type promSample struct {
	Labels string  `json:"labels"`
	Value  float64 `json:"value"`
}

type promExprTest struct {
	Expr     string       `json:"expr"`
	EvalTime string       `json:"eval_time"`
	Samples  []promSample `json:"exp_samples"`
}

type promSeries struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

type promTest struct {
	Interval string         `json:"interval"`
	Input    []promSeries   `json:"input_series"`
	Exprs    []promExprTest `json:"promql_expr_test"`
}

// rowExprs returns the queries of the Traffic dashboard's row, by panel
// title, expanded with the dashboard's usual variables; it skips the test
// when promtool is not installed.
func rowExprs(t *testing.T, row string) map[string]string {
	t.Helper()
	return dashboardRowExprs(t, "flowlens-traffic.json", row)
}

// dashboardRowExprs is rowExprs for a row of the dashboard in file.
func dashboardRowExprs(t *testing.T, file, row string) map[string]string {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Skip("promtool not installed (make deps-prometheus)")
	}
	m, err := dashboards.Parse(committed(t)[file])
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"__rate_interval": "2m", "__range": "10m", "top": "10", "src_namespace": ".*", "dst_namespace": ".*"}
	expr := map[string]string{}
	for _, p := range m.Panels {
		if p.Row != row {
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
	return expr
}

// runPromtool runs the tests with promtool test rules.
func runPromtool(t *testing.T, tests []promTest) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), []byte("groups: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(map[string]any{"rule_files": []string{"rules.yml"}, "evaluation_interval": "1m", "tests": tests})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yml"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("promtool", "test", "rules", "tests.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

package install

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/flowlens/flowlens/internal/testkit"
)

const (
	rulesFile   = "manifests/flowlens-alerts.rules.yaml"
	runbookBase = "https://github.com/flowlens/flowlens/blob/main/docs/alerts.md#"
)

// rule is one alerting rule of a Prometheus rules file.
type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// ruleGroups is a Prometheus rules file, and a PrometheusRule's spec.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

// alerts returns the rules of manifests/flowlens-alerts.rules.yaml.
func alerts(t *testing.T) []rule {
	t.Helper()
	var g ruleGroups
	if err := yaml.UnmarshalStrict(readFile(t, rulesFile), &g); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var rules []rule
	for _, grp := range g.Groups {
		rules = append(rules, grp.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return rules
}

// TestAlertRules runs promtool test rules on testdata/alerts.test.yaml:
// for every alert, input series that fire it (with its exact labels and
// annotations) and series that do not.
func TestAlertRules(t *testing.T) {
	_, missing := exec.LookPath("promtool")
	if missing != nil {
		missing = errors.New("no promtool in PATH (Debian's prometheus package): run `make deps-prometheus`")
	}
	testkit.Need(t, "promtool", missing)
	cmd := exec.Command("promtool", "test", "rules", "alerts.test.yaml")
	cmd.Dir = filepath.Join(root(t), "test", "install", "testdata")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestAlertRulesCovered: testdata/alerts.test.yaml has, for every alert of
// the rules file, a case where it fires and one where it does not, and the
// rules file is the one it tests.
func TestAlertRulesCovered(t *testing.T) {
	var tf struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(readFile(t, "test/install/testdata/alerts.test.yaml"), &tf); err != nil {
		t.Fatal(err)
	}
	if want := []string{"../../../" + rulesFile}; !reflect.DeepEqual(tf.RuleFiles, want) {
		t.Fatalf("rule_files %q, want %q", tf.RuleFiles, want)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, c := range tf.Tests {
		for _, a := range c.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range alerts(t) {
		if !fires[r.Alert] {
			t.Errorf("%s: no test case where it fires", r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("%s: no test case where it does not fire", r.Alert)
		}
	}
}

// TestAlertsHaveRunbooks: every alert has a severity, a summary, a
// description and a runbook_url pointing at its own section of
// docs/alerts.md, and every alert section of docs/alerts.md is an alert's.
func TestAlertsHaveRunbooks(t *testing.T) {
	doc := string(readFile(t, "docs/alerts.md"))
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (Flowlens\w+)$`).FindAllStringSubmatch(doc, -1) {
		sections[m[1]] = true
	}
	seen := map[string]bool{}
	for _, r := range alerts(t) {
		if seen[r.Alert] {
			t.Errorf("%s: twice", r.Alert)
		}
		seen[r.Alert] = true
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
		}
		for _, a := range []string{"summary", "description"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		if got, want := r.Annotations["runbook_url"], runbookBase+strings.ToLower(r.Alert); got != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
		}
		if !sections[r.Alert] {
			t.Errorf("%s: no section \"## %s\" in docs/alerts.md", r.Alert, r.Alert)
		}
	}
	for s := range sections {
		if !seen[s] {
			t.Errorf("docs/alerts.md has a section %s, which is no alert of %s", s, rulesFile)
		}
	}
}

// TestAlertMetricsExist: every metric an alert reads is one flowlens serves
// (documented in docs/metrics-agent.md or docs/metrics.md, as the dashboards'
// are), Prometheus' up, or one of the two kube-state-metrics series of
// FlowlensAgentNotReady.
func TestAlertMetricsExist(t *testing.T) {
	known := map[string]bool{
		"up": true, // Prometheus' per target
		"kube_daemonset_status_desired_number_scheduled": true, // kube-state-metrics
		"kube_daemonset_status_number_ready":             true,
	}
	for _, doc := range []string{"docs/metrics-agent.md", "docs/metrics.md"} {
		for _, m := range regexp.MustCompile("`(flowlens_[a-z_]+)`").FindAllStringSubmatch(string(readFile(t, doc)), -1) {
			known[m[1]] = true
		}
	}
	// Metric names: flowlens' and kube-state-metrics' by their prefixes
	// (no label of the rules has them), and up by its selector.
	name := regexp.MustCompile(`\b(?:flowlens|kube)_[a-z_]+\b|\bup\{`)
	for _, r := range alerts(t) {
		found := 0
		for _, n := range name.FindAllString(r.Expr, -1) {
			n = strings.TrimSuffix(n, "{")
			found++
			if !known[n] {
				t.Errorf("%s reads %s, which no flowlens doc names (docs/metrics-agent.md, docs/metrics.md)", r.Alert, n)
			}
		}
		if found == 0 {
			t.Errorf("%s: no metric found in %q", r.Alert, r.Expr)
		}
	}
}

// TestAlertsGenerated: the PrometheusRule manifests/flowlens-alerts.yaml
// holds exactly the rules of the rules file, and the chart's copy is the
// rules file (both written by `make generate-install`).
func TestAlertsGenerated(t *testing.T) {
	var src ruleGroups
	if err := yaml.UnmarshalStrict(readFile(t, rulesFile), &src); err != nil {
		t.Fatal(err)
	}
	objs := manifest(t, "flowlens-alerts.yaml")
	if len(objs) != 1 || objs[0].GetKind() != "PrometheusRule" || objs[0].GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Fatalf("manifests/flowlens-alerts.yaml: want one monitoring.coreos.com/v1 PrometheusRule, got %d objects (first %s)", len(objs), key(objs[0]))
	}
	spec, err := yaml.Marshal(objs[0].Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	var got ruleGroups
	if err := yaml.UnmarshalStrict(spec, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, src) {
		t.Errorf("manifests/flowlens-alerts.yaml's rules differ from %s: run `make generate-install`", rulesFile)
	}
	if !bytes.Equal(readFile(t, "charts/flowlens/files/flowlens-alerts.rules.yaml"), readFile(t, rulesFile)) {
		t.Errorf("charts/flowlens/files/flowlens-alerts.rules.yaml differs from %s: run `make generate-install`", rulesFile)
	}
}

package install

import (
	"bytes"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/flowlens/flowlens/internal/operator/render"
)

const (
	chart          = "charts/flowlens"
	chartNamespace = "flowlens-system" // the namespace of the manifests' operator
	monitoringAPI  = "monitoring.coreos.com/v1"
)

// helmTemplate runs helm template on the chart into flowlens-system, CRDs included,
// with --set values, and returns its objects.
func helmTemplate(t *testing.T, set ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "flowlens", chart, "--namespace", chartNamespace, "--include-crds"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return decode(t, "helm template", helm(t, args...))
}

// manifestObjects returns what a user applies from manifests/ for what the
// chart installs with its default values: the operator, the collector and
// the dashboards (applied with -n flowlens-system).
func manifestObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs := append(manifest(t, "flowlens-operator.yaml"), manifest(t, "flowlens-collector.yaml")...)
	for _, u := range manifest(t, "dashboards/flowlens-dashboards-configmap.yaml") {
		u.SetNamespace(chartNamespace)
		objs = append(objs, u)
	}
	return objs
}

// namespaceOf returns the Namespace named name among objs.
func namespaceOf(t *testing.T, objs []*unstructured.Unstructured, name string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == "Namespace" && u.GetName() == name {
			return u
		}
	}
	t.Fatalf("no Namespace %s", name)
	return nil
}

// sameObjects fails t for every object of want missing from got, or
// different there, and every object of got that want lacks.
func sameObjects(t *testing.T, got, want []*unstructured.Unstructured) {
	t.Helper()
	g, w := byKey(t, "chart", got), byKey(t, "manifests", want)
	for k, wu := range w {
		gu, ok := g[k]
		switch {
		case !ok:
			t.Errorf("the chart lacks %s", k)
		case !reflect.DeepEqual(gu.Object, wu.Object):
			gy, _ := yaml.Marshal(gu.Object)
			wy, _ := yaml.Marshal(wu.Object)
			t.Errorf("%s differs:\n--- chart:\n%s\n--- manifests:\n%s", k, gy, wy)
		}
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			t.Errorf("the chart has %s, which manifests/ lacks", k)
		}
	}
}

// TestChartMatchesManifests: `helm template` with the default values renders
// the objects of manifests/flowlens-operator.yaml, flowlens-collector.yaml
// and the dashboards' ConfigMaps, object by object and field by field, with
// one difference: no Namespace flowlens-system, Helm's release namespace
// (helm install --create-namespace). Both declare the agents' namespace
// flowlens (privileged, for the agents the operator runs there), where the
// operator's Role is and the collector goes.
func TestChartMatchesManifests(t *testing.T) {
	got := helmTemplate(t)
	var want []*unstructured.Unstructured
	for _, u := range manifestObjects(t) {
		if u.GetKind() == "Namespace" && u.GetName() == chartNamespace {
			continue
		}
		want = append(want, u)
	}
	sameObjects(t, got, want)
	for _, u := range got {
		if u.GetAPIVersion() == monitoringAPI {
			t.Errorf("default values render %s: it needs the Prometheus Operator's CRDs and must be off by default", key(u))
		}
	}
}

// TestChartMonitoring: with serviceMonitors.enabled and
// prometheusRule.enabled the chart adds exactly the objects of
// manifests/flowlens-servicemonitors.yaml and manifests/flowlens-alerts.yaml;
// without the collector, neither its objects nor its ServiceMonitor, but
// still the Kafka collectors' (the operator runs those, not the chart), and
// still the agents' namespace with the operator's Role there, and the Role
// flowlens-observe, as manifests/flowlens-operator.yaml has them.
func TestChartMonitoring(t *testing.T) {
	var got []*unstructured.Unstructured
	for _, u := range helmTemplate(t, "serviceMonitors.enabled=true", "prometheusRule.enabled=true") {
		if u.GetAPIVersion() == monitoringAPI {
			got = append(got, u)
		}
	}
	sameObjects(t, got, append(manifest(t, "flowlens-servicemonitors.yaml"), manifest(t, "flowlens-alerts.yaml")...))

	kafka := false
	for _, u := range helmTemplate(t, "serviceMonitors.enabled=true", "collector.enabled=false") {
		operators := u.GetName() == "flowlens-operator" && (u.GetKind() == "Role" || u.GetKind() == "RoleBinding") ||
			u.GetName() == render.ObserveRoleName && u.GetKind() == "Role" ||
			u.GetKind() == "Namespace" && u.GetName() == "flowlens" ||
			u.GetKind() == "ServiceMonitor" && (u.GetName() == "flowlens-agent" || u.GetName() == "flowlens-collector-kafka")
		if !operators && (u.GetNamespace() == "flowlens" || u.GetName() == "flowlens-collector" || u.GetKind() == "Namespace") {
			t.Errorf("collector.enabled=false renders %s", key(u))
		}
		kafka = kafka || u.GetKind() == "ServiceMonitor" && u.GetName() == "flowlens-collector-kafka"
	}
	if !kafka {
		t.Error("collector.enabled=false: no ServiceMonitor flowlens-collector-kafka")
	}
}

// TestChartValues: the values an install changes reach the objects.
func TestChartValues(t *testing.T) {
	objs := byKey(t, "chart", helmTemplate(t,
		"operator.image=registry.example/op:v9", "operator.agentImage=registry.example/agent:v9",
		"collector.image=registry.example/col:v9", "collector.replicas=3", "collector.extraArgs={--pod-labels}",
		"agentNamespace=observability", "dashboards.namespace=monitoring",
		"serviceMonitors.enabled=true", "serviceMonitors.labels.release=kps", "serviceMonitors.interval=15s",
		"serviceMonitors.tlsConfig.agent.serverName=agents.example",
		"serviceMonitors.tlsConfig.agent.ca.secret.name=agent-metrics-ca", "serviceMonitors.tlsConfig.agent.ca.secret.key=ca.crt",
		"prometheusRule.enabled=true", "prometheusRule.labels.release=kps"))
	get := func(k string, path ...string) any {
		t.Helper()
		u, ok := objs[k]
		if !ok {
			t.Fatalf("no %s", k)
		}
		v, _, err := unstructured.NestedFieldNoCopy(u.Object, path...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	containers := func(k string) map[string]any {
		return get(k, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	}
	op := containers("Deployment flowlens-system/flowlens-operator")
	if op["image"] != "registry.example/op:v9" || !slices.Contains(op["args"].([]any), any("--agent-image=registry.example/agent:v9")) {
		t.Errorf("operator container: %v", op)
	}
	col := containers("Deployment observability/flowlens-collector")
	if col["image"] != "registry.example/col:v9" || !slices.Contains(col["args"].([]any), any("--pod-labels")) {
		t.Errorf("collector container: %v", col)
	}
	if r := get("Deployment observability/flowlens-collector", "spec", "replicas"); r != int64(3) && r != float64(3) {
		t.Errorf("collector replicas %v", r)
	}
	namespaceOf(t, helmTemplate(t, "agentNamespace=observability"), "observability")
	if ns := get("ServiceMonitor observability/flowlens-agent", "spec", "namespaceSelector", "matchNames"); !reflect.DeepEqual(ns, []any{"observability"}) {
		t.Errorf("agent ServiceMonitor matchNames %v", ns)
	}
	if l := get("ServiceMonitor observability/flowlens-collector", "metadata", "labels", "release"); l != "kps" {
		t.Errorf("ServiceMonitor label release %v", l)
	}
	if i := get("ServiceMonitor flowlens-system/flowlens-operator", "spec", "endpoints").([]any)[0].(map[string]any)["interval"]; i != "15s" {
		t.Errorf("ServiceMonitor interval %v", i)
	}
	// The agents with a tlsConfig of the values; the Kafka collectors and
	// the collector with the scrape identity, for their Service's name in
	// agentNamespace; the operator over HTTPS with Prometheus' token,
	// always.
	agentEP := get("ServiceMonitor observability/flowlens-agent", "spec", "endpoints").([]any)[0].(map[string]any)
	wantTLS := map[string]any{"serverName": "agents.example",
		"ca": map[string]any{"secret": map[string]any{"name": "agent-metrics-ca", "key": "ca.crt"}}}
	if agentEP["scheme"] != "https" || !reflect.DeepEqual(agentEP["tlsConfig"], wantTLS) {
		t.Errorf("agent ServiceMonitor endpoint %v, want scheme https and tlsConfig %v", agentEP, wantTLS)
	}
	identity := func(svc string) map[string]any {
		return map[string]any{"serverName": svc + ".observability.svc",
			"ca":        map[string]any{"configMap": map[string]any{"name": "flowlens-ca", "key": "ca.crt"}},
			"cert":      map[string]any{"secret": map[string]any{"name": "flowlens-metrics-client", "key": "tls.crt"}},
			"keySecret": map[string]any{"name": "flowlens-metrics-client", "key": "tls.key"}}
	}
	for _, name := range []string{"flowlens-collector-kafka", "flowlens-collector"} {
		ep := get("ServiceMonitor observability/"+name, "spec", "endpoints").([]any)[0].(map[string]any)
		if ep["scheme"] != "https" || !reflect.DeepEqual(ep["tlsConfig"], identity(name)) {
			t.Errorf("%s ServiceMonitor endpoint %v, want scheme https and tlsConfig %v", name, ep, identity(name))
		}
	}
	// scrapeIdentity=false: plain HTTP but the operator; the collector
	// likewise with collector.metricsPlaintext.
	plain := byKey(t, "chart", helmTemplate(t, "serviceMonitors.enabled=true", "serviceMonitors.scrapeIdentity=false", "collector.metricsPlaintext=true"))
	for _, name := range []string{"flowlens-agent", "flowlens-collector-kafka", "flowlens-collector"} {
		ep := plain["ServiceMonitor flowlens/"+name].Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
		if ep["scheme"] != nil || ep["tlsConfig"] != nil {
			t.Errorf("scrapeIdentity=false: %s ServiceMonitor endpoint %v, want plain HTTP", name, ep)
		}
	}
	pc := plain["Deployment flowlens/flowlens-collector"].Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if args := fmt.Sprint(pc["args"]); strings.Contains(args, "--web-config-file") || fmt.Sprint(pc["readinessProbe"]) != "map[httpGet:map[path:/readyz port:metrics]]" {
		t.Errorf("collector.metricsPlaintext=true: args %s, readiness probe %v; want plain HTTP", args, pc["readinessProbe"])
	}
	opEP := get("ServiceMonitor flowlens-system/flowlens-operator", "spec", "endpoints").([]any)[0].(map[string]any)
	if opEP["scheme"] != "https" || opEP["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" ||
		!reflect.DeepEqual(opEP["tlsConfig"], map[string]any{"insecureSkipVerify": true}) {
		t.Errorf("flowlens-operator ServiceMonitor endpoint %v, want HTTPS with Prometheus' token", opEP)
	}
	if l := get("PrometheusRule flowlens-system/flowlens", "metadata", "labels", "release"); l != "kps" {
		t.Errorf("PrometheusRule label release %v", l)
	}
	get("ConfigMap monitoring/flowlens-dashboard-traffic", "data")
}

// TestChartRefusesBadValues: values.schema.json refuses a bad value, with
// an error naming it.
func TestChartRefusesBadValues(t *testing.T) {
	for set, want := range map[string]string{
		"collector.replicas=-1":                                     "/collector/replicas",
		"collector.replicass=2":                                     "'replicass' not allowed",
		"collector.imagePullPolicy=Sometimes":                       "/collector/imagePullPolicy",
		"collector.extraArgs={pod-labels}":                          "/collector/extraArgs/0",
		"serviceMonitors.interval=fast":                             "/serviceMonitors/interval",
		"agentNamespace=Bad_NS":                                     "/agentNamespace",
		"dashboards.namespace=-x":                                   "/dashboards/namespace",
		"prometheusRule.enabled=yes-please":                         "/prometheusRule/enabled",
		"serviceMonitors.tlsConfig.agent.serverNam=x":               "/serviceMonitors/tlsConfig/agent",
		"serviceMonitors.tlsConfig.kafka.serverName=x":              "'kafka' not allowed",
		"serviceMonitors.tlsConfig.collector-kafka.serverNam=x":     "/serviceMonitors/tlsConfig/collector-kafka",
		"serviceMonitors.tlsConfig.operator.insecureSkipVerify=yes": "/serviceMonitors/tlsConfig/operator/insecureSkipVerify",
		"serviceMonitors.interval=1m30s":                            "", // valid: accepted
	} {
		_, stderr, err := runHelm(t, "template", "flowlens", chart, "--set", set)
		if want == "" {
			if err != nil {
				t.Errorf("--set %s: %v\n%s", set, err, stderr)
			}
			continue
		}
		if err == nil || !strings.Contains(string(stderr), want) {
			t.Errorf("--set %s: %v, want an error naming %q; stderr:\n%s", set, err, want, stderr)
		}
	}
}

// TestHelmLint: helm lint --strict is clean with the default values and with
// every optional object on.
func TestHelmLint(t *testing.T) {
	helm(t, "lint", "--strict", chart)
	helm(t, "lint", "--strict", chart, "--set", "serviceMonitors.enabled=true,prometheusRule.enabled=true,collector.enabled=false")
}

// TestChartFilesGenerated: the chart's copies of generated files are
// current (`make generate-install` writes them).
func TestChartFilesGenerated(t *testing.T) {
	copies := map[string]string{
		"files/operator-role.yaml":         "config/rbac/role.yaml",
		"files/flowlens-alerts.rules.yaml": rulesFile,
	}
	dashboards, err := filepath.Glob(filepath.Join(root(t), "manifests", "dashboards", "*.json"))
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no manifests/dashboards/*.json (%v)", err)
	}
	for _, d := range dashboards {
		copies["files/dashboards/"+filepath.Base(d)] = "manifests/dashboards/" + filepath.Base(d)
	}
	crd := decode(t, "the chart's CRD", readFile(t, filepath.Join(chart, "crds", "flowlens.io_flowcollectors.yaml")))
	for _, u := range manifest(t, "flowlens-operator.yaml") {
		if u.GetKind() == "CustomResourceDefinition" && (len(crd) != 1 || !reflect.DeepEqual(crd[0].Object, u.Object)) {
			t.Errorf("%s/crds/flowlens.io_flowcollectors.yaml is not manifests/flowlens-operator.yaml's CRD: run `make generate-install`", chart)
		}
	}
	for dst, src := range copies {
		if !bytes.Equal(readFile(t, filepath.Join(chart, dst)), readFile(t, src)) {
			t.Errorf("%s/%s differs from %s: run `make generate-install`", chart, dst, src)
		}
	}
}

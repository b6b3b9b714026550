package install

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
)

// target is a Service a ServiceMonitor may scrape and the pod template of
// the workload behind it.
type target struct {
	service *unstructured.Unstructured
	pods    *unstructured.Unstructured // the pod template
}

// toUnstructured converts an object (typed, or an apply configuration) to
// its unstructured form, through JSON.
func toUnstructured(t *testing.T, obj any) *unstructured.Unstructured {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// operatorAgent returns the agents' headless metrics Service as the
// operator renders it for a default FlowCollector, with its DaemonSet's pod
// template.
func operatorAgent(t *testing.T) target {
	t.Helper()
	fc := &v1alpha1.FlowCollector{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName, UID: "uid-1"},
		Spec:       render.WithDefaults(v1alpha1.FlowCollectorSpec{}),
	}
	objs, err := render.Build(fc, render.Options{DefaultImage: "ghcr.io/flowlens/flowlens-agent:v0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	return target{toUnstructured(t, objs.Service), podTemplate(t, toUnstructured(t, objs.DaemonSet))}
}

// operatorKafkaCollector returns the Kafka collectors' metrics Service as
// the operator renders it for a FlowCollector with a kafka exporter, with
// their Deployment's pod template.
func operatorKafkaCollector(t *testing.T) target {
	t.Helper()
	fc := &v1alpha1.FlowCollector{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName, UID: "uid-1"},
		Spec: render.WithDefaults(v1alpha1.FlowCollectorSpec{Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterKafka,
			Kafka: &v1alpha1.KafkaExporter{Brokers: []string{"kafka-0.kafka.svc:9092"}}}}}),
	}
	objs, err := render.Build(fc, render.Options{DefaultImage: "ghcr.io/flowlens/flowlens-agent:v0.1.0",
		DefaultCollectorImage: "ghcr.io/flowlens/flowlens-collector:v0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if objs.Collector == nil {
		t.Fatal("a FlowCollector with a kafka exporter: the operator renders no Kafka collector")
	}
	return target{toUnstructured(t, objs.Collector.Service), podTemplate(t, toUnstructured(t, objs.Collector.Deployment))}
}

// targets returns the agents' metrics Service and pods of one way to run
// them, the Kafka collectors' the operator renders, and the Services of
// manifests/ (the collector's, the operator's) with their Deployments' pods.
func targets(t *testing.T, agent target) []target {
	t.Helper()
	ts := []target{agent, operatorKafkaCollector(t)}
	workloads := map[string]*unstructured.Unstructured{}
	var services []*unstructured.Unstructured
	for _, u := range append(manifest(t, "flowlens-operator.yaml"), manifest(t, "flowlens-collector.yaml")...) {
		switch u.GetKind() {
		case "Service":
			services = append(services, u)
		case "Deployment":
			workloads[u.GetNamespace()+"/"+u.GetName()] = u
		}
	}
	for _, s := range services {
		// Each Service's pods are those of the Deployment of the same app.kubernetes.io/name.
		name := s.GetLabels()["app.kubernetes.io/name"]
		d, ok := workloads[s.GetNamespace()+"/"+name]
		if !ok {
			t.Fatalf("Service %s: no Deployment %s/%s", s.GetName(), s.GetNamespace(), name)
		}
		ts = append(ts, target{s, podTemplate(t, d)})
	}
	return ts
}

// plainAgent returns the metrics Service and the DaemonSet's pod template of
// manifests/flowlens-agent-daemonset.yaml (the agents without the operator).
func plainAgent(t *testing.T) target {
	t.Helper()
	var tg target
	for _, u := range manifest(t, "flowlens-agent-daemonset.yaml") {
		switch u.GetKind() {
		case "Service":
			tg.service = u
		case "DaemonSet":
			tg.pods = podTemplate(t, u)
		}
	}
	if tg.service == nil || tg.pods == nil {
		t.Fatal("manifests/flowlens-agent-daemonset.yaml: want a Service and a DaemonSet")
	}
	return tg
}

func podTemplate(t *testing.T, workload *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	m, ok, err := unstructured.NestedMap(workload.Object, "spec", "template")
	if !ok || err != nil {
		t.Fatalf("%s: no pod template (%v)", key(workload), err)
	}
	return &unstructured.Unstructured{Object: m}
}

// selects reports whether every label of sel is in labels.
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// stringMap returns the string map at path of u.
func stringMap(t *testing.T, u *unstructured.Unstructured, path ...string) map[string]string {
	t.Helper()
	m, _, err := unstructured.NestedStringMap(u.Object, path...)
	if err != nil {
		t.Fatalf("%s: %v", key(u), err)
	}
	return m
}

// TestServiceMonitorsSelectServices: each ServiceMonitor of
// manifests/flowlens-servicemonitors.yaml selects exactly one Service that
// exists (the agents': the headless flowlens-agent-metrics the operator
// renders; the Kafka collectors': the flowlens-collector-kafka the operator
// renders for a kafka exporter; the collector's and the operator's:
// manifests/), in a namespace its namespaceSelector names; its endpoints
// name ports of that Service, whose target port is a named port of the pods
// the Service selects; its jobLabel is a label of the Service; and the jobs
// the alerts select are the jobs the ServiceMonitors produce.
func TestServiceMonitorsSelectServices(t *testing.T) {
	jobs := map[string]bool{}
	for _, agent := range []target{operatorAgent(t), plainAgent(t)} {
		checkServiceMonitors(t, targets(t, agent), jobs)
	}
	for _, want := range []string{"flowlens-agent", "flowlens-collector", render.CollectorName, "flowlens-operator"} {
		if !jobs[want] {
			t.Errorf("no ServiceMonitor produces the job %s", want)
		}
	}
	// Every job an alert selects is one a ServiceMonitor produces.
	selected := alertJobs(t, string(readFile(t, rulesFile)))
	for _, job := range selected {
		if !jobs[job] {
			t.Errorf("%s selects job %q, which no ServiceMonitor produces", rulesFile, job)
		}
	}
	// The collectors' down alert covers the Kafka collectors too.
	if !slices.Contains(selected, render.CollectorName) {
		t.Errorf("no alert of %s selects job %q", rulesFile, render.CollectorName)
	}
}

// alertJobs returns the jobs the rules select: job="name", or
// job=~"a|b" with literal names only (anything else is an error: the check
// could not tell which jobs it matches).
func alertJobs(t *testing.T, rules string) []string {
	t.Helper()
	var jobs []string
	for _, m := range regexp.MustCompile(`job(=~?)"([^"]*)"`).FindAllStringSubmatch(rules, -1) {
		names := []string{m[2]}
		if m[1] == "=~" {
			names = strings.Split(m[2], "|")
		}
		for _, n := range names {
			if !regexp.MustCompile(`^[a-z0-9-]+$`).MatchString(n) {
				t.Errorf("%s: job selector %s: %q is no plain job name", rulesFile, m[0], n)
				continue
			}
			jobs = append(jobs, n)
		}
	}
	return jobs
}

// checkServiceMonitors checks each ServiceMonitor against the Services ts,
// adding the jobs they produce to jobs.
func checkServiceMonitors(t *testing.T, ts []target, jobs map[string]bool) {
	t.Helper()
	for _, sm := range manifest(t, "flowlens-servicemonitors.yaml") {
		if sm.GetKind() != "ServiceMonitor" || sm.GetAPIVersion() != monitoringAPI {
			t.Fatalf("%s: not a %s ServiceMonitor", key(sm), monitoringAPI)
		}
		sel := stringMap(t, sm, "spec", "selector", "matchLabels")
		namespaces, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
		var matched []target
		for _, tg := range ts {
			if slices.Contains(namespaces, tg.service.GetNamespace()) && selects(sel, tg.service.GetLabels()) {
				matched = append(matched, tg)
			}
		}
		if len(matched) != 1 {
			t.Errorf("%s selects %d Services, want 1", key(sm), len(matched))
			continue
		}
		svc, pods := matched[0].service, matched[0].pods
		jobLabel, _, _ := unstructured.NestedString(sm.Object, "spec", "jobLabel")
		job := svc.GetLabels()[jobLabel]
		if job == "" {
			t.Errorf("%s: jobLabel %q is no label of Service %s", key(sm), jobLabel, svc.GetName())
		}
		jobs[job] = true

		var ports []corev1.ServicePort
		raw, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		if err := fromUnstructured(raw, &ports); err != nil {
			t.Fatal(err)
		}
		var podSpec corev1.PodSpec
		podMap, _, _ := unstructured.NestedMap(pods.Object, "spec")
		if err := fromUnstructured(podMap, &podSpec); err != nil {
			t.Fatal(err)
		}
		if !selects(stringMap(t, svc, "spec", "selector"), stringMap(t, pods, "metadata", "labels")) {
			t.Errorf("%s does not select its pods", key(svc))
		}
		endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(endpoints) == 0 {
			t.Errorf("%s has no endpoints", key(sm))
		}
		for _, e := range endpoints {
			name := e.(map[string]any)["port"]
			i := slices.IndexFunc(ports, func(p corev1.ServicePort) bool { return p.Name == name })
			if i < 0 {
				t.Errorf("%s: %s has no port named %v", key(sm), key(svc), name)
				continue
			}
			if !podPortNamed(podSpec, ports[i].TargetPort.String()) {
				t.Errorf("%s port %s: target port %s is no named container port of its pods", key(svc), ports[i].Name, ports[i].TargetPort.String())
			}
		}
	}
}

// TestPlainAgentServiceMatchesOperator: the metrics Service of
// manifests/flowlens-agent-daemonset.yaml is the operator's: same name,
// namespace, labels the ServiceMonitor selects, and spec.
func TestPlainAgentServiceMatchesOperator(t *testing.T) {
	op, plain := operatorAgent(t).service, plainAgent(t).service
	if key(op) != key(plain) {
		t.Errorf("plain manifest's %s, operator's %s", key(plain), key(op))
	}
	if !selects(plain.GetLabels(), op.GetLabels()) {
		t.Errorf("plain manifest's Service labels %v are not among the operator's %v", plain.GetLabels(), op.GetLabels())
	}
	if !reflect.DeepEqual(op.Object["spec"], plain.Object["spec"]) {
		t.Errorf("Service spec: plain manifest %v, operator %v", plain.Object["spec"], op.Object["spec"])
	}
}

func fromUnstructured(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func podPortNamed(spec corev1.PodSpec, name string) bool {
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

// monitoringCRDs returns the ServiceMonitor and PrometheusRule CRDs of the
// Prometheus Operator release hack/monitoring-crds pins, from the Go module
// cache (`make monitoring-crds` downloads the module).
func monitoringCRDs(t *testing.T) []string {
	t.Helper()
	// In short mode, skip before running go (it may download).
	testkit.Need(t, "the Prometheus Operator's CRDs", nil)
	cmd := exec.Command("go", "-C", filepath.Join(root(t), "hack", "monitoring-crds"), "mod", "download", "-json",
		"github.com/prometheus-operator/prometheus-operator")
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if err == nil {
		err = json.Unmarshal(out, &mod)
	}
	if err == nil && mod.Dir == "" {
		err = fmt.Errorf("no module directory: %s", mod.Error)
	}
	if err != nil {
		err = fmt.Errorf("downloading the Prometheus Operator module: %v (run `make monitoring-crds`)", err)
	}
	testkit.Need(t, "the Prometheus Operator's CRDs", err)
	dir := filepath.Join(mod.Dir, "example", "prometheus-operator-crd")
	return []string{
		filepath.Join(dir, "monitoring.coreos.com_servicemonitors.yaml"),
		filepath.Join(dir, "monitoring.coreos.com_prometheusrules.yaml"),
	}
}

// TestMonitoringObjectsValid: the ServiceMonitors and the PrometheusRule of
// manifests/ and of the chart (every monitoring value set) are valid
// objects for the Prometheus Operator's own CRDs, installed in a real
// kube-apiserver: a strict dry-run create of each passes the CRDs' schemas
// and refuses unknown fields.
func TestMonitoringObjectsValid(t *testing.T) {
	crds := monitoringCRDs(t)
	env := envtest.StartT(t, envtest.Options{CRDs: crds})
	k8s, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The release's namespace (the operator's ServiceMonitor) and the
	// agents' (the others', beside the Secrets their tlsConfig names).
	for _, name := range []string{chartNamespace, "flowlens"} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	objs := append(manifest(t, "flowlens-servicemonitors.yaml"), manifest(t, "flowlens-alerts.yaml")...)
	for _, u := range helmTemplate(t, "serviceMonitors.enabled=true", "serviceMonitors.labels.release=kps", "serviceMonitors.interval=15s",
		"serviceMonitors.tlsConfig.agent.serverName=flowlens-agent-metrics.flowlens.svc",
		"serviceMonitors.tlsConfig.agent.ca.secret.name=agent-metrics-ca", "serviceMonitors.tlsConfig.agent.ca.secret.key=ca.crt",
		"serviceMonitors.tlsConfig.agent.cert.secret.name=prometheus-client", "serviceMonitors.tlsConfig.agent.cert.secret.key=tls.crt",
		"serviceMonitors.tlsConfig.agent.keySecret.name=prometheus-client", "serviceMonitors.tlsConfig.agent.keySecret.key=tls.key",
		"serviceMonitors.tlsConfig.operator.insecureSkipVerify=true",
		"prometheusRule.enabled=true", "prometheusRule.labels.release=kps") {
		if u.GetAPIVersion() == monitoringAPI {
			objs = append(objs, u)
		}
	}
	kinds := map[string]int{}
	for _, u := range objs {
		if err := k8s.Create(ctx, u, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
			t.Errorf("%s: %v", key(u), err)
		}
		kinds[u.GetKind()]++
	}
	if kinds["ServiceMonitor"] != 8 || kinds["PrometheusRule"] != 2 {
		t.Errorf("validated %v, want 8 ServiceMonitors and 2 PrometheusRules (manifests/ and the chart)", kinds)
	}

	// The check can fail: an unknown field is refused.
	bad := manifest(t, "flowlens-servicemonitors.yaml")[0]
	if err := unstructured.SetNestedField(bad.Object, "metrics", "spec", "endpoints-typo"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, bad, client.DryRunAll, client.FieldValidation("Strict")); err == nil {
		t.Error("a ServiceMonitor with an unknown field was accepted")
	}
}

// TestServiceMonitorsScrapeIdentity: the ServiceMonitors of the agents,
// the collector and the Kafka collectors (manifests/, the chart's default)
// scrape over HTTPS with the objects the operator keeps: the client
// certificate of the Secret certs.MetricsClientName, the CA bundle of the
// ConfigMap certs.CAName, and as serverName a DNS name of the metrics
// certificate (render.MetricsDNSNames), the one of the Service each
// selects; and each lives in the namespace of those objects, the one it
// scrapes, where the Prometheus Operator reads them.
func TestServiceMonitorsScrapeIdentity(t *testing.T) {
	const ns = render.DefaultNamespace
	names := render.MetricsDNSNames(ns)
	services := map[string]string{"flowlens-agent": render.MetricsServiceName, "flowlens-collector": certs.CollectorService, "flowlens-collector-kafka": render.CollectorName}
	seen := 0
	for _, sm := range manifest(t, "flowlens-servicemonitors.yaml") {
		svc, ok := services[sm.GetName()]
		if !ok {
			continue
		}
		seen++
		matchNames, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
		if sm.GetNamespace() != ns || !slices.Equal(matchNames, []string{ns}) {
			t.Errorf("%s in namespace %s scraping %v, want both %s (the Secret's)", key(sm), sm.GetNamespace(), matchNames, ns)
		}
		ep := sm.Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
		want := map[string]any{
			"serverName": svc + "." + ns + ".svc",
			"ca":         map[string]any{"configMap": map[string]any{"name": certs.CAName, "key": certs.BundleKey}},
			"cert":       map[string]any{"secret": map[string]any{"name": certs.MetricsClientName, "key": "tls.crt"}},
			"keySecret":  map[string]any{"name": certs.MetricsClientName, "key": "tls.key"},
		}
		if ep["scheme"] != "https" || !reflect.DeepEqual(ep["tlsConfig"], want) {
			t.Errorf("%s endpoint %v, want scheme https and tlsConfig %v", key(sm), ep, want)
		}
		if !slices.Contains(names, want["serverName"].(string)) {
			t.Errorf("%s: serverName %s is no DNS name of the metrics certificate %v", key(sm), want["serverName"], names)
		}
	}
	if seen != 3 {
		t.Errorf("%d ServiceMonitors of the agents and collectors, want 3", seen)
	}
}

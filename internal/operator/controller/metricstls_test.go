package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// spec.agent.metricsTLS against the real API server (schema) and the
// reconciler: the web configuration, the Secrets' mounts, the probes; and
// the Ready condition of an agent whose Secret is missing.

// TestMetricsTLSSchemaRejects: bad Secret references are refused with these
// messages, in spec.agent.metricsTLS and spec.collector.metricsTLS alike.
func TestMetricsTLSSchemaRejects(t *testing.T) {
	needEnv(t)
	for _, owner := range []string{"agent", "collector"} {
		t.Run(owner, func(t *testing.T) { testMetricsTLSSchemaRejects(t, owner) })
	}
}

func testMetricsTLSSchemaRejects(t *testing.T, owner string) {
	cases := []struct {
		name string
		tls  string // spec.<owner>.metricsTLS, YAML
		want string
	}{
		{"no server secret", `{}`,
			"spec.agent.metricsTLS.serverSecretRef: Required value"},
		{"empty server secret name", `{serverSecretRef: {name: ""}}`,
			"spec.agent.metricsTLS.serverSecretRef.name in body should be at least 1 chars long"},
		{"server secret name not a DNS name", `{serverSecretRef: {name: Agent_Metrics}}`,
			`spec.agent.metricsTLS.serverSecretRef.name: Invalid value: "Agent_Metrics": not a Secret name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit`},
		{"client CA secret name with a slash", `{serverSecretRef: {name: tls}, clientCASecretRef: {name: ns/ca}}`,
			`spec.agent.metricsTLS.clientCASecretRef.name: Invalid value: "ns/ca": not a Secret name`},
		{"client CA key with a slash", `{serverSecretRef: {name: tls}, clientCASecretRef: {name: ca, key: certs/ca.crt}}`,
			`spec.agent.metricsTLS.clientCASecretRef.key: Invalid value: "certs/ca.crt": not a Secret key: letters, digits, '-', '_' and '.'`},
		{"unknown field", `{serverSecretRef: {name: tls}, clientAuth: require}`,
			".spec.agent.metricsTLS.clientAuth: field not declared in schema"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			manifest := "apiVersion: flowlens.io/v1alpha1\nkind: FlowCollector\nmetadata: {name: cluster}\nspec:\n  " + owner + ":\n    metricsTLS: " + tc.tls + "\n"
			want := strings.ReplaceAll(tc.want, "spec.agent.", "spec."+owner+".")
			fc := newCollector("")
			err := k8s.Patch(context.Background(), fc, client.RawPatch("application/apply-patch+yaml", []byte(manifest)),
				client.FieldOwner("test"), client.DryRunAll, client.FieldValidation("Strict"))
			if err == nil {
				t.Fatalf("accepted; want %q", want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q, want it to contain %q", err, want)
			}
		})
	}
	// The same Secret may hold the certificate and the client CA (as
	// cert-manager's do); the key defaults to ca.crt.
	fc := newCollector("")
	manifest := "apiVersion: flowlens.io/v1alpha1\nkind: FlowCollector\nmetadata: {name: cluster}\nspec:\n  " + owner + ":\n    metricsTLS: {serverSecretRef: {name: agent-metrics.tls}, clientCASecretRef: {name: agent-metrics.tls}}\n"
	if err := k8s.Patch(context.Background(), fc, client.RawPatch("application/apply-patch+yaml", []byte(manifest)),
		client.FieldOwner("test"), client.DryRunAll); err != nil {
		t.Fatalf("a valid metricsTLS: %v", err)
	}
	tls := fc.Spec.Agent.MetricsTLS
	if owner == "collector" {
		tls = fc.Spec.Collector.MetricsTLS
	}
	if ca := tls.ClientCASecretRef; ca.Key != render.DefaultCAKey {
		t.Errorf("client CA key %q, want the default %q", ca.Key, render.DefaultCAKey)
	}
}

// probeOf describes a probe as "HTTPS GET /path metrics" or "TCP metrics".
func probeOf(p *corev1.Probe) string {
	switch {
	case p == nil:
		return "none"
	case p.HTTPGet != nil:
		return fmt.Sprintf("%s GET %s %s", p.HTTPGet.Scheme, p.HTTPGet.Path, p.HTTPGet.Port.String())
	case p.TCPSocket != nil:
		return "TCP " + p.TCPSocket.Port.String()
	}
	return fmt.Sprintf("%+v", p.ProbeHandler)
}

// secretVolumes returns the Secret volumes of pod's first container as
// "mount path <- secret/key:path,key:path" lines.
func secretVolumes(pod *corev1.PodSpec) []string {
	paths := map[string]string{}
	for _, m := range pod.Containers[0].VolumeMounts {
		if !m.ReadOnly {
			paths[m.Name] = m.MountPath + " (writable)"
			continue
		}
		paths[m.Name] = m.MountPath
	}
	var out []string
	for _, v := range pod.Volumes {
		if v.Secret == nil {
			continue
		}
		var items []string
		for _, it := range v.Secret.Items {
			items = append(items, it.Key+":"+it.Path)
		}
		out = append(out, fmt.Sprintf("%s <- %s/%s", paths[v.Name], v.Secret.SecretName, strings.Join(items, ",")))
	}
	return out
}

// TestMetricsTLS: metricsTLS renders the web configuration into the agent's
// ConfigMap and its path into agent.yaml, mounts the certificate's Secret
// where the web configuration says, and probes over HTTPS; a client CA adds
// its Secret and client certificates to the web configuration, and TCP
// probes; removing metricsTLS restores plain HTTP (spec.metricsPlaintext),
// and the same pods; without metricsPlaintext, the default: the operator's
// Secret flowlens-metrics-tls and HTTPS probes.
func TestMetricsTLS(t *testing.T) {
	needEnv(t)
	const ns = "fl-metrics-tls"
	fc := newCollector(ns)
	fc.Spec.MetricsPlaintext = true
	create(t, fc)
	plain := waitFor(t, agentDaemonSet(ns), exists)
	plainHash := hashOf(plain)
	c := plain.Spec.Template.Spec.Containers[0]
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if got := probeOf(p); got != "HTTP GET /healthz metrics" && got != "HTTP GET /readyz metrics" {
			t.Errorf("plain HTTP probe %s", got)
		}
	}

	check := func(what string, wantWeb string, wantVolumes, wantProbes []string) {
		t.Helper()
		cm := waitFor(t, configMap(ns), func(cm *corev1.ConfigMap) error {
			if cm.Data[render.WebConfigKey] != wantWeb {
				return fmt.Errorf("%s: web config %q, want %q", what, cm.Data[render.WebConfigKey], wantWeb)
			}
			return nil
		})
		cfg := cm.Data[render.ConfigKey]
		if has := strings.Contains(cfg, "\nweb_config_file: /etc/flowlens/web-config.yml\n"); has != (wantWeb != "") {
			t.Errorf("%s: agent.yaml has web_config_file: %v, want %v:\n%s", what, has, wantWeb != "", cfg)
		}
		ds := waitFor(t, agentDaemonSet(ns), func(ds *appsv1.DaemonSet) error {
			if hashOf(ds) != render.Hash([]byte(cfg)) {
				return fmt.Errorf("%s: pod template hash %s, want the new agent.yaml's", what, hashOf(ds))
			}
			// A client CA changes the volumes, not agent.yaml: wait for them
			// too (the reconcile writes the ConfigMap before the DaemonSet).
			if got := secretVolumes(&ds.Spec.Template.Spec); len(got) != len(wantVolumes) {
				return fmt.Errorf("%s: %d secret volumes, want %d", what, len(got), len(wantVolumes))
			}
			return nil
		})
		if got := secretVolumes(&ds.Spec.Template.Spec); strings.Join(got, "\n") != strings.Join(wantVolumes, "\n") {
			t.Errorf("%s: secret volumes\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(wantVolumes, "\n"))
		}
		c := ds.Spec.Template.Spec.Containers[0]
		got := []string{probeOf(c.StartupProbe), probeOf(c.LivenessProbe), probeOf(c.ReadinessProbe)}
		if strings.Join(got, "; ") != strings.Join(wantProbes, "; ") {
			t.Errorf("%s: startup, liveness, readiness probes %q, want %q", what, got, wantProbes)
		}
		if p := c.LivenessProbe; p.PeriodSeconds != 10 || p.TimeoutSeconds != 2 || p.FailureThreshold != 3 {
			t.Errorf("%s: liveness timing %+v", what, p)
		}
		if p := c.StartupProbe; p.PeriodSeconds != 5 || p.FailureThreshold != 12 {
			t.Errorf("%s: startup timing %+v", what, p)
		}
	}

	if err := update(t, func(fc *v1alpha1.FlowCollector) {
		fc.Spec.Agent.MetricsTLS = &v1alpha1.MetricsTLS{ServerSecretRef: v1alpha1.SecretRef{Name: "agent-metrics"}}
	}); err != nil {
		t.Fatal(err)
	}
	check("TLS", `# Generated by the flowlens operator from spec.agent.metricsTLS: do not edit.
tls_server_config:
    cert_file: /etc/flowlens/metrics/tls/tls.crt
    key_file: /etc/flowlens/metrics/tls/tls.key
`, []string{"/etc/flowlens/metrics/tls <- agent-metrics/tls.crt:tls.crt,tls.key:tls.key"},
		[]string{"HTTPS GET /healthz metrics", "HTTPS GET /healthz metrics", "HTTPS GET /readyz metrics"})

	if err := update(t, func(fc *v1alpha1.FlowCollector) {
		fc.Spec.Agent.MetricsTLS.ClientCASecretRef = &v1alpha1.SecretKeyRef{Name: "scrapers-ca"}
	}); err != nil {
		t.Fatal(err)
	}
	check("mutual TLS", `# Generated by the flowlens operator from spec.agent.metricsTLS: do not edit.
tls_server_config:
    cert_file: /etc/flowlens/metrics/tls/tls.crt
    key_file: /etc/flowlens/metrics/tls/tls.key
    client_auth_type: RequireAndVerifyClientCert
    client_ca_file: /etc/flowlens/metrics/client-ca/ca.crt
`, []string{
		"/etc/flowlens/metrics/tls <- agent-metrics/tls.crt:tls.crt,tls.key:tls.key",
		"/etc/flowlens/metrics/client-ca <- scrapers-ca/ca.crt:ca.crt",
	}, []string{"TCP metrics", "TCP metrics", "TCP metrics"})

	// Removed: the web configuration key goes (server-side apply drops
	// what the operator no longer sets), and the pod template is the plain
	// one again, hash included.
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.MetricsTLS = nil }); err != nil {
		t.Fatal(err)
	}
	check("plain HTTP again", "", nil, []string{"HTTP GET /healthz metrics", "HTTP GET /healthz metrics", "HTTP GET /readyz metrics"})
	if ds := waitFor(t, agentDaemonSet(ns), exists); hashOf(ds) != plainHash {
		t.Errorf("hash %s after removing metricsTLS, want the first one %s", hashOf(ds), plainHash)
	}

	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.MetricsPlaintext = false }); err != nil {
		t.Fatal(err)
	}
	web, _ := render.DefaultWebConfig()
	check("default", string(web), []string{"/etc/flowlens/metrics/tls <- flowlens-metrics-tls/tls.crt:tls.crt,tls.key:tls.key,ca.crt:ca.crt"},
		[]string{"HTTPS GET /healthz metrics", "HTTPS GET /healthz metrics", "HTTPS GET /readyz metrics"})
}

// TestMountFailureCondition: an agent pod whose Secret is missing makes
// Ready False with reason MountFailed and the kubelet's message, even when
// the kubelet's event comes after the DaemonSet's status; once the pod is
// ready, the reason goes. envtest has no kubelet and no DaemonSet
// controller: the test writes the pod, its event and the DaemonSet's status
// as they would (make e2e-kubelet checks the same with a real kubelet).
func TestMountFailureCondition(t *testing.T) {
	needEnv(t)
	const ns = "fl-mount"
	ctx := context.Background()
	fc := newCollector(ns)
	fc.Spec.Agent.MetricsTLS = &v1alpha1.MetricsTLS{ServerSecretRef: v1alpha1.SecretRef{Name: "missing-cert"}}
	create(t, fc)
	ds := waitFor(t, agentDaemonSet(ns), exists)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: render.AgentName + "-x7k2p", Namespace: ns, Labels: ds.Spec.Template.Labels},
		Spec:       ds.Spec.Template.Spec,
	}
	pod.Spec.NodeName = "node-1"
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	setDaemonSetStatus(t, ns, 1, 1, 0)
	waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonAgentsNotReady)

	const kubeletMsg = `MountVolume.SetUp failed for volume "metrics-tls" : secret "missing-cert" not found`
	event := func(name string, involved *corev1.Pod, reason, msg string, at time.Time) {
		t.Helper()
		e := &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: involved.Name, UID: involved.UID,
				APIVersion: "v1"},
			Reason: reason, Message: msg, Type: corev1.EventTypeWarning, Count: 1,
			Source:         corev1.EventSource{Component: "kubelet", Host: "node-1"},
			FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at),
		}
		if err := k8s.Create(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	// Not counted: another reason, and a mount failure of a pod that is
	// not the agent's.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}, Spec: corev1.PodSpec{
		NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}}}}
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	event("other.1", other, "FailedMount", `MountVolume.SetUp failed for volume "x" : secret "x" not found`, now)
	event(pod.Name+".0", pod, "Scheduled", "Successfully assigned", now)
	// An older failure, then the latest: the latest is reported.
	event(pod.Name+".1", pod, "FailedMount", `MountVolume.SetUp failed for volume "metrics-tls" : older`, now.Add(-time.Minute))
	event(pod.Name+".2", pod, "FailedMount", kubeletMsg, now)

	got := waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonMountFailed)
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	want := "0 of 1 agents are ready; an agent cannot mount a volume (does the Secret exist in fl-mount?): pod " + pod.Name + ": " + kubeletMsg
	if c.Message != want {
		t.Errorf("Ready message\n%q, want\n%q", c.Message, want)
	}
	if d := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionDegraded); d == nil || d.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %+v, want False: the objects are applied", d)
	}

	// The Secret created, the pod starts and is ready: its old events no
	// longer count.
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	setDaemonSetStatus(t, ns, 1, 1, 1)
	waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAgentsReady)

	// A new pod failing again (the agent restarted, say): reported again.
	if err := k8s.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	pod2 := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: render.AgentName + "-q9w4z", Namespace: ns, Labels: ds.Spec.Template.Labels},
		Spec:       pod.Spec,
	}
	if err := k8s.Create(ctx, pod2); err != nil {
		t.Fatal(err)
	}
	setDaemonSetStatus(t, ns, 1, 1, 0)
	event(pod2.Name+".1", pod2, "FailedMount", kubeletMsg, time.Now())
	got = waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonMountFailed)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); !strings.HasSuffix(c.Message, "pod "+pod2.Name+": "+kubeletMsg) {
		t.Errorf("Ready message %q, want the new pod's failure", c.Message)
	}
}

// setDaemonSetStatus writes the agent DaemonSet's status, as its controller
// would, for its current generation.
func setDaemonSetStatus(t *testing.T, ns string, desired, updated, ready int32) {
	t.Helper()
	ds := waitFor(t, agentDaemonSet(ns), exists)
	ds.Status = appsv1.DaemonSetStatus{
		ObservedGeneration:     ds.Generation,
		CurrentNumberScheduled: desired,
		DesiredNumberScheduled: desired,
		UpdatedNumberScheduled: updated,
		NumberReady:            ready,
		NumberAvailable:        ready,
		NumberUnavailable:      desired - ready,
	}
	if err := k8s.Status().Update(context.Background(), ds); err != nil {
		t.Fatalf("writing the DaemonSet status: %v", err)
	}
}

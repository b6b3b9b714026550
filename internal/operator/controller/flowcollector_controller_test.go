package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/dashboards"
	"github.com/flowlens/flowlens/internal/operator/render"
)

const wait = 20 * time.Second

// newCollector returns the FlowCollector singleton with its agents in
// namespace ns. Every test uses its own namespace: envtest has no garbage
// collector, so a deleted FlowCollector's objects stay behind.
func newCollector(ns string) *v1alpha1.FlowCollector {
	return &v1alpha1.FlowCollector{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName},
		Spec:       v1alpha1.FlowCollectorSpec{Namespace: ns},
	}
}

// create creates fc and deletes it when the test ends.
func create(t *testing.T, fc *v1alpha1.FlowCollector) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, fc); err != nil {
		t.Fatalf("creating the FlowCollector: %v", err)
	}
	t.Cleanup(func() { deleteCollector(t) })
}

func deleteCollector(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	fc := &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName}}
	if err := k8s.Delete(ctx, fc); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting the FlowCollector: %v", err)
	}
	eventually(t, wait, func() error {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(fc), fc)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("FlowCollector still there (err %v)", err)
	})
}

// update applies change to the current FlowCollector, retrying on conflicts.
func update(t *testing.T, change func(*v1alpha1.FlowCollector)) error {
	t.Helper()
	ctx := context.Background()
	for {
		fc := get(t)
		change(fc)
		err := k8s.Update(ctx, fc)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

func get(t *testing.T) *v1alpha1.FlowCollector {
	t.Helper()
	fc := &v1alpha1.FlowCollector{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: v1alpha1.SingletonName}, fc); err != nil {
		t.Fatalf("reading the FlowCollector: %v", err)
	}
	return fc
}

// waitFor polls obj (by its name and namespace) until check accepts it.
func waitFor[T client.Object](t *testing.T, obj T, check func(T) error) T {
	t.Helper()
	eventually(t, wait, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		return check(obj)
	})
	return obj
}

func exists[T client.Object](T) error { return nil }

// waitCondition waits until the FlowCollector's condition typ has status and
// reason, for the current generation, and returns the FlowCollector.
func waitCondition(t *testing.T, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.FlowCollector {
	t.Helper()
	fc := &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName}}
	return waitFor(t, fc, func(fc *v1alpha1.FlowCollector) error {
		c := meta.FindStatusCondition(fc.Status.Conditions, typ)
		switch {
		case c == nil:
			return fmt.Errorf("no %s condition yet (status %+v)", typ, fc.Status)
		case fc.Status.ObservedGeneration != fc.Generation || c.ObservedGeneration != fc.Generation:
			return fmt.Errorf("status is for generation %d, want %d", fc.Status.ObservedGeneration, fc.Generation)
		case c.Status != status || c.Reason != reason:
			return fmt.Errorf("%s is %s/%s (%q), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
		}
		return nil
	})
}

func agentDaemonSet(ns string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: render.AgentName, Namespace: ns}}
}

func configMap(ns string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: render.ConfigMapName, Namespace: ns}}
}

func hashOf(ds *appsv1.DaemonSet) string {
	return ds.Spec.Template.Annotations[render.ConfigHashAnnotation]
}

// TestCreate: a FlowCollector with only defaults yields every object, with
// the fields the agent needs, owned by the FlowCollector.
func TestCreate(t *testing.T) {
	needEnv(t)
	const ns = "fl-create"
	fc := newCollector(ns)
	create(t, fc)

	// The API server filled in the schema defaults.
	fc = get(t)
	if fc.Spec.Agent.Sampling != 1 || fc.Spec.Agent.CacheMaxFlows != 100000 || fc.Spec.Agent.CacheActiveTimeout.Duration != 5*time.Second ||
		fc.Spec.Agent.MetricsPort != 9400 || fc.Spec.Agent.LogLevel != "info" || fc.Spec.Agent.ImagePullPolicy != corev1.PullIfNotPresent ||
		!slices.Equal(fc.Spec.Agent.ExcludeInterfaces, []string{"lo"}) || !slices.Equal(fc.Spec.Agent.Netns, []string{"host"}) ||
		len(fc.Spec.Agent.Features) != 4 || len(fc.Spec.Exporters) != 1 || fc.Spec.Exporters[0].Type != v1alpha1.ExporterStdout ||
		len(fc.Spec.Agent.Tolerations) != 1 || fc.Spec.Agent.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("schema defaults not applied: %+v", fc.Spec)
	}
	// The schema's defaults (the kubebuilder markers) are the operator's,
	// render.WithDefaults, which takes the agent's own (render's
	// TestRenderedDefaults): one value each, whoever fills the field in.
	// Only the containers' resources are the operator's alone: the schema
	// leaves them unset, the renderer fills them in.
	want := render.WithDefaults(newCollector(ns).Spec)
	want.Agent.Resources, want.Collector.Resources = nil, nil
	if !equality.Semantic.DeepEqual(fc.Spec, want) {
		t.Errorf("the schema's defaults differ from render.WithDefaults:\n got  %+v\n want %+v", fc.Spec, want)
	}

	nsObj := waitFor(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, exists)
	if nsObj.Labels[render.PodSecurityEnforceLabel] != "privileged" {
		t.Errorf("namespace labels %v: want pod security level privileged", nsObj.Labels)
	}
	sa := waitFor(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: render.AgentName, Namespace: ns}}, exists)
	role := waitFor(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: render.AgentName, Namespace: ns}}, exists)
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].ResourceNames, []string{render.ConfigMapName}) {
		t.Errorf("agent role rules %+v: want get/watch of its own ConfigMap only", role.Rules)
	}
	rb := waitFor(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: render.AgentName, Namespace: ns}}, exists)
	if rb.RoleRef.Name != render.AgentName || len(rb.Subjects) != 1 || rb.Subjects[0].Name != sa.Name || rb.Subjects[0].Namespace != ns {
		t.Errorf("role binding %+v does not bind the agent's role to its service account", rb)
	}
	cm := waitFor(t, configMap(ns), exists)
	cfg := cm.Data[render.ConfigKey]
	for _, want := range []string{
		"sampling: 1\n", "cache_active_timeout: 5s\n", "cache_max_flows: 100000\n",
		"web_config_file: /etc/flowlens/web-config.yml\n", "log_level: info\n", "netns_dir: /var/run/netns\n",
		"export:\n    - stdout\n", "features:\n    - drops\n    - rtt\n    - retransmits\n",
		"exclude_interfaces:\n    - lo\n", "interfaces: []\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("agent config lacks %q:\n%s", want, cfg)
		}
	}
	svc := waitFor(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: render.MetricsServiceName, Namespace: ns}}, exists)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9400 ||
		svc.Spec.Ports[0].TargetPort.StrVal != "metrics" {
		t.Errorf("metrics service spec %+v", svc.Spec)
	}

	ds := waitFor(t, agentDaemonSet(ns), exists)
	for k, v := range svc.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("metrics service selector %v does not select the agent pods %v", svc.Spec.Selector, ds.Spec.Template.Labels)
		}
	}
	checkDaemonSet(t, ds, cfg)

	for _, obj := range []client.Object{nsObj, sa, role, rb, cm, svc, ds} {
		checkOwner(t, obj, fc)
	}

	// No node runs the agent (and envtest has no DaemonSet controller).
	fc = waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected)
	if c := meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Ready condition %+v: want False while no agent is ready", c)
	}
	if fc.Status.Namespace != ns {
		t.Errorf("status namespace %q, want %q", fc.Status.Namespace, ns)
	}
}

func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, cfg string) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || pod.HostPID {
		t.Errorf("hostNetwork %v hostPID %v: want the host network only", pod.HostNetwork, pod.HostPID)
	}
	if pod.ServiceAccountName != render.AgentName {
		t.Errorf("service account %q", pod.ServiceAccountName)
	}
	if pod.NodeSelector[corev1.LabelOSStable] != "linux" {
		t.Errorf("node selector %v: want linux nodes", pod.NodeSelector)
	}
	if s := ds.Spec.UpdateStrategy; s.Type != appsv1.RollingUpdateDaemonSetStrategyType || s.RollingUpdate == nil ||
		s.RollingUpdate.MaxUnavailable.IntValue() != 1 || s.RollingUpdate.MaxSurge.IntValue() != 0 {
		t.Errorf("update strategy %+v: want a rolling update, one node at a time, no surge", s)
	}
	if got, want := hashOf(ds), render.Hash([]byte(cfg)); got != want {
		t.Errorf("config hash annotation %q, want the hash of the ConfigMap's agent.yaml %q", got, want)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != testAgentImage || !slices.Equal(c.Args, []string{"--config", "/etc/flowlens/agent.yaml"}) {
		t.Errorf("image %q args %q", c.Image, c.Args)
	}
	// The node's name; its address, which the metrics bind (issue #27).
	if len(c.Env) != 3 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom == nil ||
		c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" ||
		c.Env[1].Name != "HOST_IP" || c.Env[1].ValueFrom == nil || c.Env[1].ValueFrom.FieldRef == nil || c.Env[1].ValueFrom.FieldRef.FieldPath != "status.hostIP" ||
		c.Env[2].Name != "FLOWLENS_AGENT_METRICS_ADDRESS" || c.Env[2].Value != "[$(HOST_IP)]:9400" {
		t.Errorf("env %+v: want NODE_NAME from spec.nodeName, HOST_IP from status.hostIP, FLOWLENS_AGENT_METRICS_ADDRESS [$(HOST_IP)]:9400", c.Env)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" ||
		c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		c.LivenessProbe.HTTPGet.Port.StrVal != "metrics" {
		t.Errorf("probes: liveness %+v readiness %+v", c.LivenessProbe, c.ReadinessProbe)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9400 {
		t.Errorf("ports %+v", c.Ports)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"BPF", "PERFMON", "NET_ADMIN"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("security context %+v: want unprivileged with BPF, PERFMON, NET_ADMIN", sc)
	}
	if c.Resources.Requests.Cpu().String() != "100m" || c.Resources.Limits.Memory().String() != "512Mi" {
		t.Errorf("resources %+v: want the defaults", c.Resources)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	// One host path, read-only: named network namespaces. Not the BPF
	// filesystem, nor tracefs, which the agent does not use (issue #27).
	if m, ok := mounts["/var/run/netns"]; !ok || hostPaths[m.Name] != "/var/run/netns" || !m.ReadOnly || len(hostPaths) != 1 {
		t.Errorf("host paths %v, mounts %v: want /var/run/netns alone, read-only", hostPaths, mounts)
	}
	if m := mounts["/var/run/netns"]; m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("/var/run/netns propagation %v, want HostToContainer", m.MountPropagation)
	}
	if _, ok := mounts["/etc/flowlens"]; !ok {
		t.Errorf("config not mounted at /etc/flowlens: %v", mounts)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("tolerations %+v: want to tolerate every taint", pod.Tolerations)
	}
}

// checkOwner checks that obj is controlled by fc, so deleting fc deletes it.
func checkOwner(t *testing.T, obj client.Object, fc *v1alpha1.FlowCollector) {
	t.Helper()
	refs := obj.GetOwnerReferences()
	if len(refs) != 1 {
		t.Errorf("%T %s: owner references %+v, want exactly the FlowCollector", obj, obj.GetName(), refs)
		return
	}
	r := refs[0]
	if r.UID != fc.UID || r.Kind != "FlowCollector" || r.APIVersion != v1alpha1.GroupVersion.String() || r.Name != fc.Name ||
		r.Controller == nil || !*r.Controller || r.BlockOwnerDeletion == nil || !*r.BlockOwnerDeletion {
		t.Errorf("%T %s: owner reference %+v, want a blocking controller reference to FlowCollector %s (%s)", obj, obj.GetName(), r, fc.Name, fc.UID)
	}
}

// TestSpecChangeRollsAgents: a configuration change reaches the ConfigMap and
// changes the pod template's hash (so the DaemonSet rolls the pods); a change
// outside the agent configuration leaves the hash alone.
func TestSpecChangeRollsAgents(t *testing.T) {
	needEnv(t)
	const ns = "fl-update"
	create(t, newCollector(ns))
	ds := waitFor(t, agentDaemonSet(ns), exists)
	oldHash := hashOf(ds)

	err := update(t, func(fc *v1alpha1.FlowCollector) {
		fc.Spec.Agent.Sampling = 50
		fc.Spec.Agent.CacheActiveTimeout = &metav1.Duration{Duration: 15 * time.Second}
		fc.Spec.Agent.Interfaces = []string{"eth0", "/^ens[0-9]+$/"}
		fc.Spec.Agent.Features = []v1alpha1.Feature{v1alpha1.FeatureDrops}
		fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterGRPC, GRPC: &v1alpha1.GRPCExporter{
			TargetHost: "flowlens-collector.flowlens.svc", TargetPort: 9999,
			TLS: &v1alpha1.ExporterTLS{CASecretRef: &v1alpha1.SecretKeyRef{Name: "collector-ca"}},
		}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	cm := waitFor(t, configMap(ns), func(cm *corev1.ConfigMap) error {
		if !strings.Contains(cm.Data[render.ConfigKey], "sampling: 50\n") {
			return errors.New("ConfigMap not updated yet")
		}
		return nil
	})
	cfg := cm.Data[render.ConfigKey]
	for _, want := range []string{
		"cache_active_timeout: 15s\n", "interfaces:\n    - eth0\n    - /^ens[0-9]+$/\n", "features:\n    - drops\n",
		"export:\n    - grpc\n", "target: flowlens-collector.flowlens.svc:9999\n", "grpc_batch_size: 1000\n",
		"tls_ca: /etc/flowlens/tls/ca/ca.crt\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("agent config lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "tls_cert") {
		t.Errorf("agent config has a client certificate though none is set:\n%s", cfg)
	}
	ds = waitFor(t, agentDaemonSet(ns), func(ds *appsv1.DaemonSet) error {
		if hashOf(ds) == oldHash {
			return errors.New("pod template hash unchanged")
		}
		return nil
	})
	if got, want := hashOf(ds), render.Hash([]byte(cfg)); got != want {
		t.Errorf("hash %s, want %s (the new configuration's)", got, want)
	}
	var caVolume *corev1.Volume
	for i, v := range ds.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "collector-ca" {
			caVolume = &ds.Spec.Template.Spec.Volumes[i]
		}
	}
	if caVolume == nil || len(caVolume.Secret.Items) != 1 || caVolume.Secret.Items[0].Key != "ca.crt" {
		t.Errorf("CA secret not mounted: volumes %+v", ds.Spec.Template.Spec.Volumes)
	}

	// Scheduling changes roll the pods through the template itself, not the
	// hash, which only tracks the agent configuration.
	hash := hashOf(ds)
	gen := ds.Generation
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.NodeSelector = map[string]string{"flowlens": "yes"} }); err != nil {
		t.Fatal(err)
	}
	ds = waitFor(t, agentDaemonSet(ns), func(ds *appsv1.DaemonSet) error {
		if ds.Spec.Template.Spec.NodeSelector["flowlens"] != "yes" {
			return errors.New("node selector not applied yet")
		}
		return nil
	})
	if hashOf(ds) != hash || ds.Generation <= gen {
		t.Errorf("after a node selector change: hash %s (was %s), generation %d (was %d)", hashOf(ds), hash, ds.Generation, gen)
	}
}

// TestPrivilegedAndNetns: privileged mode, and SYS_ADMIN only when the agent
// must enter other network namespaces.
func TestPrivilegedAndNetns(t *testing.T) {
	needEnv(t)
	const ns = "fl-privileged"
	fc := newCollector(ns)
	fc.Spec.Agent.Netns = []string{"all"}
	create(t, fc)
	ds := waitFor(t, agentDaemonSet(ns), exists)
	if caps := ds.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities; caps == nil || !slices.Contains(caps.Add, "SYS_ADMIN") {
		t.Errorf("netns all: capabilities %+v, want SYS_ADMIN added", caps)
	}
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.Privileged = true }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, agentDaemonSet(ns), func(ds *appsv1.DaemonSet) error {
		sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
		if sc.Privileged == nil || !*sc.Privileged {
			return errors.New("not privileged yet")
		}
		if sc.Capabilities != nil {
			return fmt.Errorf("privileged with capabilities %+v: they would be redundant", sc.Capabilities)
		}
		return nil
	})
}

// TestSchemaRejectsInvalidSpec: the CRD's OpenAPI and CEL rules reject bad
// values at admission, with the API server's own messages.
func TestSchemaRejectsInvalidSpec(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		change func(*v1alpha1.FlowCollector)
		want   string
	}{
		{"negative sampling", func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.Sampling = -1 },
			"spec.agent.sampling: Invalid value: -1: spec.agent.sampling in body should be greater than or equal to 1"},
		{"cache too small", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Agent.CacheActiveTimeout = &metav1.Duration{Duration: 10 * time.Millisecond}
		}, "must be a duration from 100ms to 1h"},
		{"cache flows", func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.CacheMaxFlows = 20_000_000 },
			"spec.agent.cacheMaxFlows: Invalid value: 20000000: spec.agent.cacheMaxFlows in body should be less than or equal to 10000000"},
		{"name", func(fc *v1alpha1.FlowCollector) { fc.Name = "other" },
			"the FlowCollector must be named cluster"},
		{"log level", func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.LogLevel = "verbose" },
			`spec.agent.logLevel: Unsupported value: "verbose": supported values: "debug", "info", "warn", "error"`},
		{"feature", func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.Features = []v1alpha1.Feature{"latency"} },
			`spec.agent.features[0]: Unsupported value: "latency"`},
		{"grpc without target", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterGRPC}}
		}, "grpc must be set for, and only for, type grpc"},
		{"ipfix without its settings", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX}}
		}, "spec.exporters[0]: Invalid value: ipfix must be set for, and only for, type ipfix"},
		{"ipfix settings on stdout", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterStdout,
				IPFIX: &v1alpha1.IPFIXExporter{TargetHost: "ipfix", TargetPort: 4739}}}
		}, "spec.exporters[0]: Invalid value: ipfix must be set for, and only for, type ipfix"},
		{"ipfix empty target", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX,
				IPFIX: &v1alpha1.IPFIXExporter{TargetPort: 4739}}}
		}, "spec.exporters[0].ipfix.targetHost in body should be at least 1 chars long"},
		{"ipfix transport", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX,
				IPFIX: &v1alpha1.IPFIXExporter{TargetHost: "ipfix", TargetPort: 4739, Transport: "sctp"}}}
		}, `spec.exporters[0].ipfix.transport: Unsupported value: "sctp": supported values: "udp", "tcp"`},
		{"ipfix refresh too short", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX, IPFIX: &v1alpha1.IPFIXExporter{
				TargetHost: "ipfix", TargetPort: 4739, TemplateRefresh: &metav1.Duration{Duration: 500 * time.Millisecond}}}}
		}, `spec.exporters[0].ipfix.templateRefresh: Invalid value: "500ms": must be a duration from 1s to 1h`},
		{"ipfix refresh too long", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX, IPFIX: &v1alpha1.IPFIXExporter{
				TargetHost: "ipfix", TargetPort: 4739, TemplateRefresh: &metav1.Duration{Duration: 2 * time.Hour}}}}
		}, `spec.exporters[0].ipfix.templateRefresh: Invalid value: "2h0m0s": must be a duration from 1s to 1h`},
		{"ipfix domain id", func(fc *v1alpha1.FlowCollector) {
			id := int64(1) << 32
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX, IPFIX: &v1alpha1.IPFIXExporter{
				TargetHost: "ipfix", TargetPort: 4739, DomainID: &id}}}
		}, "spec.exporters[0].ipfix.domainId in body should be less than or equal to 4294967295"},
		{"ipfix message size too small", func(fc *v1alpha1.FlowCollector) {
			n := int32(1000)
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX, IPFIX: &v1alpha1.IPFIXExporter{
				TargetHost: "ipfix", TargetPort: 4739, MaxMessageSize: &n}}}
		}, "spec.exporters[0].ipfix.maxMessageSize in body should be greater than or equal to 1024"},
		{"ipfix message size over udp", func(fc *v1alpha1.FlowCollector) {
			n := int32(65508)
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX, IPFIX: &v1alpha1.IPFIXExporter{
				TargetHost: "ipfix", TargetPort: 4739, MaxMessageSize: &n}}}
		}, "spec.exporters[0].ipfix.maxMessageSize: Invalid value: must be at most 65507 over udp (the largest UDP payload)"},
		{"ipfix enterprise number", func(fc *v1alpha1.FlowCollector) {
			pen := int64(0)
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX, IPFIX: &v1alpha1.IPFIXExporter{
				TargetHost: "ipfix", TargetPort: 4739, EnterpriseNumber: &pen}}}
		}, "spec.exporters[0].ipfix.enterpriseNumber in body should be greater than or equal to 1"},
		{"two stdout exporters", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterStdout}, {Type: v1alpha1.ExporterStdout}}
		}, `spec.exporters[1]: Duplicate value: {"type":"stdout"}`},
		{"port", func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.MetricsPort = 70000 },
			"spec.agent.metricsPort in body should be less than or equal to 65535"},
		{"netns all and names", func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.Netns = []string{"all", "blue"} },
			`"all" cannot be combined with namespace names`},
		{"netns path", func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.Netns = []string{"../x"} },
			`spec.agent.netns[0] in body should match '^[^/]+$'`},
		{"dns ports: too many", func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.DNSPorts = []int32{53, 54, 55, 56, 57} },
			"spec.agent.dnsPorts: Too many: 5: must have at most 4 items"},
		{"dns ports: zero", func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.DNSPorts = []int32{53, 0} },
			"spec.agent.dnsPorts[1]: Invalid value: 0: spec.agent.dnsPorts[1] in body should be greater than or equal to 1"},
		{"dns ports: empty", func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.DNSPorts = []int32{} },
			"spec.agent.dnsPorts: Invalid value: 0: spec.agent.dnsPorts in body should have at least 1 items"},
		{"dns timeout", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Agent.DNSTimeout = &metav1.Duration{Duration: 2 * time.Minute}
		}, `spec.agent.dnsTimeout: Invalid value: "2m0s": must be a duration from 100ms to 1m`},
		{"dashboards namespace", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Dashboards = &v1alpha1.Dashboards{Enabled: true, Namespace: "Grafana_NS"}
		}, `spec.dashboards.namespace in body should match`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fc := newCollector("fl-never")
			tc.change(fc)
			err := k8s.Create(ctx, fc)
			if err == nil {
				_ = k8s.Delete(ctx, fc)
				t.Fatalf("created; want the schema to reject it with %q", tc.want)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want an Invalid error containing %q", err, tc.want)
			}
		})
	}

	// An ipfix exporter without a target at all (Go always sends
	// targetHost), as kubectl would send it.
	raw0 := []byte(`{"apiVersion":"flowlens.io/v1alpha1","kind":"FlowCollector","metadata":{"name":"cluster"},"spec":{"exporters":[{"type":"ipfix","ipfix":{"transport":"tcp"}}]}}`)
	err0 := k8s.Patch(ctx, newCollector(""), client.RawPatch("application/apply-patch+yaml", raw0), client.FieldOwner("test"), client.DryRunAll)
	for _, want := range []string{"spec.exporters[0].ipfix.targetHost: Required value", "spec.exporters[0].ipfix.targetPort: Required value"} {
		if err0 == nil || !strings.Contains(err0.Error(), want) {
			t.Errorf("ipfix without a target: error %v, want %q", err0, want)
		}
	}

	// The bounds of the ipfix message size: 65535 over tcp, 65507 over udp
	// (transport unset: its default, udp), with the largest PEN.
	for _, x := range []v1alpha1.IPFIXExporter{
		{TargetHost: "ipfix", TargetPort: 4739, Transport: v1alpha1.IPFIXTCP, MaxMessageSize: ptr(int32(65535)), EnterpriseNumber: ptr(int64(4294967295))},
		{TargetHost: "ipfix", TargetPort: 4739, MaxMessageSize: ptr(int32(65507))},
	} {
		fc := newCollector("fl-never")
		fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX, IPFIX: &x}}
		if err := k8s.Create(ctx, fc, client.DryRunAll); err != nil {
			t.Errorf("ipfix %s, message size %d: %v; want it accepted", x.Transport, *x.MaxMessageSize, err)
		}
	}

	// Sampling 0 cannot be sent from Go (omitempty: it means "default"), so
	// send it as JSON, as kubectl would.
	raw := []byte(`{"apiVersion":"flowlens.io/v1alpha1","kind":"FlowCollector","metadata":{"name":"cluster"},"spec":{"agent":{"sampling":0}}}`)
	fc := newCollector("")
	err := k8s.Patch(ctx, fc, client.RawPatch("application/apply-patch+yaml", raw), client.FieldOwner("test"), client.DryRunAll)
	want := "spec.agent.sampling: Invalid value: 0: spec.agent.sampling in body should be greater than or equal to 1"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("sampling 0: error %v, want %q", err, want)
	}

	// The namespace cannot move once set.
	create(t, newCollector("fl-immutable"))
	err = update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Namespace = "elsewhere" })
	if err == nil || !strings.Contains(err.Error(), "namespace is immutable") {
		t.Errorf("changing the namespace: error %v, want it rejected as immutable", err)
	}
}

// TestMinimalSpec: a FlowCollector without spec.agent, or without a spec,
// gets every agent default from the schema (spec.agent defaults to {}, so
// the defaults of its fields apply), and the fields that used to be directly
// under spec (before spec.agent) are unknown fields, which a server-side
// apply (kubectl apply --server-side) refuses.
func TestMinimalSpec(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	for _, manifest := range []string{
		"apiVersion: flowlens.io/v1alpha1\nkind: FlowCollector\nmetadata: {name: cluster}\n",
		"apiVersion: flowlens.io/v1alpha1\nkind: FlowCollector\nmetadata: {name: cluster}\nspec: {namespace: flowlens}\n",
		"apiVersion: flowlens.io/v1alpha1\nkind: FlowCollector\nmetadata: {name: cluster}\nspec: {agent: {}}\n",
	} {
		fc := newCollector("")
		if err := k8s.Patch(ctx, fc, client.RawPatch("application/apply-patch+yaml", []byte(manifest)),
			client.FieldOwner("test"), client.DryRunAll); err != nil {
			t.Fatalf("%s: %v", manifest, err)
		}
		a := fc.Spec.Agent
		if fc.Spec.Namespace != "flowlens" || a.Sampling != 1 || a.CacheMaxFlows != 100000 || a.CacheActiveTimeout == nil ||
			a.CacheActiveTimeout.Duration != 5*time.Second || a.MetricsPort != 9400 || a.LogLevel != "info" ||
			a.ImagePullPolicy != corev1.PullIfNotPresent || !slices.Equal(a.ExcludeInterfaces, []string{"lo"}) ||
			!slices.Equal(a.Netns, []string{"host"}) || len(a.Features) != 4 || len(a.Tolerations) != 1 ||
			a.Privileged || a.FlowFilter != nil || len(fc.Spec.Exporters) != 1 ||
			!slices.Equal(a.DNSPorts, []int32{53}) || a.DNSTimeout == nil || a.DNSTimeout.Duration != 5*time.Second {
			t.Errorf("%s: schema defaults not applied: %+v", manifest, fc.Spec)
		}
	}

	old := "apiVersion: flowlens.io/v1alpha1\nkind: FlowCollector\nmetadata: {name: cluster}\nspec: {sampling: 10}\n"
	err := k8s.Patch(ctx, newCollector(""), client.RawPatch("application/apply-patch+yaml", []byte(old)),
		client.FieldOwner("test"), client.DryRunAll, client.FieldValidation("Strict"))
	if err == nil || !strings.Contains(err.Error(), `.spec.sampling: field not declared in schema`) {
		t.Errorf("spec.sampling (now spec.agent.sampling): error %v, want it refused as an unknown field", err)
	}
}

// TestSemanticallyInvalidSpec: what the schema cannot check (a gRPC target
// that does not parse, an interface regex that does not compile, in
// spec.agent.interfaces or in a flow filter rule) sets
// Degraded with a clear message, without touching the running agents; fixing
// the spec clears it.
func TestSemanticallyInvalidSpec(t *testing.T) {
	needEnv(t)
	const ns = "fl-degraded"
	create(t, newCollector(ns))
	ds := waitFor(t, agentDaemonSet(ns), exists)
	goodHash, goodGen := hashOf(ds), ds.Generation
	waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected)

	err := update(t, func(fc *v1alpha1.FlowCollector) {
		fc.Spec.Agent.Sampling = 7
		fc.Spec.Agent.Interfaces = []string{"/eth[0-9/"}
		fc.Spec.Agent.FlowFilter = &v1alpha1.FlowFilter{Rules: []v1alpha1.FlowFilterRule{
			{Action: v1alpha1.FilterAccept, Interfaces: []string{"eth0"}},
			{Action: v1alpha1.FilterAccept, Interfaces: []string{"/ens[/"}},
		}}
		fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterGRPC, GRPC: &v1alpha1.GRPCExporter{
			TargetHost: "collector.example.com:4317", TargetPort: 4317,
		}}}
	})
	if err != nil {
		t.Fatalf("the schema rejected a spec only the operator can judge: %v", err)
	}
	fc := waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonInvalidSpec)
	msg := meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionDegraded).Message
	for _, want := range []string{
		`spec.exporters[0].grpc.targetHost "collector.example.com:4317": must not include a port: set targetPort`,
		`spec.agent.interfaces: entry "/eth[0-9/"`,
		`spec.agent.flowFilter.rules[1].interfaces "/ens[/": error parsing regexp`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("Degraded message %q lacks %q", msg, want)
		}
	}
	if c := meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonInvalidSpec {
		t.Errorf("Ready %+v, want False/InvalidSpec", c)
	}
	// The last good configuration keeps running.
	ds = waitFor(t, agentDaemonSet(ns), exists)
	cm := waitFor(t, configMap(ns), exists)
	if hashOf(ds) != goodHash || ds.Generation != goodGen || strings.Contains(cm.Data[render.ConfigKey], "sampling: 7") {
		t.Errorf("an invalid spec changed the agents: hash %s (was %s), generation %d (was %d)", hashOf(ds), goodHash, ds.Generation, goodGen)
	}

	if err := update(t, func(fc *v1alpha1.FlowCollector) {
		fc.Spec.Agent.Interfaces = []string{"/^eth[0-9]+$/"}
		fc.Spec.Agent.FlowFilter.Rules[1].Interfaces = []string{"/^ens/"}
		fc.Spec.Exporters[0].GRPC.TargetHost = "collector.example.com"
	}); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected)
	waitFor(t, configMap(ns), func(cm *corev1.ConfigMap) error {
		if !strings.Contains(cm.Data[render.ConfigKey], "target: collector.example.com:4317\n") {
			return errors.New("fixed spec not applied yet")
		}
		return nil
	})
}

// TestStatusFollowsDaemonSet: Ready and the agent counts follow the
// DaemonSet's status, which the DaemonSet controller would write (envtest has
// none, so the test writes it).
func TestStatusFollowsDaemonSet(t *testing.T) {
	needEnv(t)
	const ns = "fl-status"
	create(t, newCollector(ns))
	waitFor(t, agentDaemonSet(ns), exists)
	fc := waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonRollingOut)
	if fc.Status.DesiredAgents != 0 || fc.Status.ReadyAgents != 0 {
		t.Errorf("counts %+v before any agent", fc.Status)
	}

	setStatus := func(desired, updated, ready int32) {
		t.Helper()
		setDaemonSetStatus(t, ns, desired, updated, ready)
	}

	setStatus(0, 0, 0)
	waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNoNodes)

	setStatus(3, 1, 1)
	fc = waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonRollingOut)
	if fc.Status.DesiredAgents != 3 || fc.Status.UpdatedAgents != 1 || fc.Status.ReadyAgents != 1 {
		t.Errorf("status %+v, want 3 desired, 1 updated, 1 ready", fc.Status)
	}

	setStatus(3, 3, 2)
	fc = waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonAgentsNotReady)
	if c := meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionReady); c.Message != "2 of 3 agents are ready" {
		t.Errorf("Ready message %q", c.Message)
	}

	setStatus(3, 3, 3)
	fc = waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAgentsReady)
	if fc.Status.DesiredAgents != 3 || fc.Status.ReadyAgents != 3 || fc.Status.UpdatedAgents != 3 {
		t.Errorf("status %+v, want 3 of 3", fc.Status)
	}

	// A spec change makes the DaemonSet's status stale until its controller
	// observes the new generation: not Ready in the meantime.
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.Sampling = 2 }); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonRollingOut)
}

// TestDoesNotFightOthers: server-side apply leaves fields the operator does
// not set to their managers, and takes back the fields it does set.
func TestDoesNotFightOthers(t *testing.T) {
	needEnv(t)
	const ns = "fl-drift"
	create(t, newCollector(ns))
	ds := waitFor(t, agentDaemonSet(ns), exists)
	ctx := context.Background()

	// Another manager adds an annotation and changes the image.
	ds.Annotations = map[string]string{"example.com/owner": "team-net"}
	ds.Spec.Template.Spec.Containers[0].Image = "example.com/evil:1"
	if err := k8s.Update(ctx, ds, client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	ds = waitFor(t, agentDaemonSet(ns), func(ds *appsv1.DaemonSet) error {
		if img := ds.Spec.Template.Spec.Containers[0].Image; img != testAgentImage {
			return fmt.Errorf("image %q not restored yet", img)
		}
		return nil
	})
	if ds.Annotations["example.com/owner"] != "team-net" {
		t.Errorf("the operator removed another manager's annotation: %v", ds.Annotations)
	}
}

// TestExistingNamespace: a namespace the operator did not create is used as
// it is and never gets an owner reference (deleting the FlowCollector must
// not delete it).
func TestExistingNamespace(t *testing.T) {
	needEnv(t)
	const ns = "fl-existing"
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	fc := newCollector(ns)
	create(t, fc)
	ds := waitFor(t, agentDaemonSet(ns), exists)
	checkOwner(t, ds, get(t))
	nsObj := &corev1.Namespace{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	if len(nsObj.OwnerReferences) != 0 || nsObj.Labels[render.LabelManagedBy] != "" {
		t.Errorf("the operator took over an existing namespace: %+v", nsObj.ObjectMeta)
	}
}

// TestDelete: deleting the FlowCollector leaves its objects to the garbage
// collector, through their owner references (envtest runs no garbage
// collector; make e2e checks the actual collection).
func TestDelete(t *testing.T) {
	needEnv(t)
	const ns = "fl-delete"
	ctx := context.Background()
	fc := newCollector(ns)
	if err := k8s.Create(ctx, fc); err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: render.AgentName, Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: render.AgentName, Namespace: ns}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: render.AgentName, Namespace: ns}},
		configMap(ns),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: render.MetricsServiceName, Namespace: ns}},
		agentDaemonSet(ns),
	}
	for _, o := range objs {
		waitFor(t, o, exists)
		checkOwner(t, o, fc)
	}
	deleteCollector(t)
	// The reconciler must not recreate anything for a deleted FlowCollector,
	// nor fail: the objects stay as they are until collected.
	time.Sleep(500 * time.Millisecond)
	for _, o := range objs {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("%T %s: %v", o, o.GetName(), err)
		}
	}
}

// TestApplyFailed: an object the API server refuses (here a node selector
// that is not a valid label) sets Degraded with the server's answer.
func TestApplyFailed(t *testing.T) {
	needEnv(t)
	const ns = "fl-applyfailed"
	fc := newCollector(ns)
	fc.Spec.Agent.NodeSelector = map[string]string{"not a label!": "x"}
	create(t, fc)
	fc = waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonApplyFailed)
	msg := meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionDegraded).Message
	if !strings.Contains(msg, "applying the daemon set") || !strings.Contains(msg, "nodeSelector") {
		t.Errorf("Degraded message %q: want the DaemonSet's rejection", msg)
	}
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.NodeSelector = map[string]string{"pool": "net"} }); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected)
	waitFor(t, agentDaemonSet(ns), exists)
}

// dashboardNames are the ConfigMaps of the three flowlens dashboards.
var dashboardNames = []string{"flowlens-dashboard-traffic", "flowlens-dashboard-drops-latency", "flowlens-dashboard-agent-health", "flowlens-dashboard-service-map"}

// waitDashboards waits until the dashboard ConfigMaps are in ns, as
// internal/operator/dashboards renders them, labelled for the sidecar and owned by fc.
func waitDashboards(t *testing.T, ns string, fc *v1alpha1.FlowCollector) {
	t.Helper()
	want, err := dashboards.ConfigMaps(ns)
	if err != nil {
		t.Fatal(err)
	}
	wantNames := make([]string, 0, len(want))
	for _, w := range want {
		wantNames = append(wantNames, w.Name)
	}
	if !slices.Equal(wantNames, dashboardNames) {
		t.Fatalf("internal/operator/dashboards ConfigMaps %v, want %v", wantNames, dashboardNames)
	}
	for _, w := range want {
		cm := waitFor(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: ns}}, exists)
		if !maps.Equal(cm.Data, w.Data) {
			t.Errorf("%s/%s: data differs from dashboards.ConfigMaps", ns, w.Name)
		}
		for k, v := range map[string]string{
			dashboards.SidecarLabel: dashboards.SidecarLabelValue,
			render.LabelComponent:   render.DashboardsComponent,
			render.LabelManagedBy:   render.ManagedByValue,
		} {
			if cm.Labels[k] != v {
				t.Errorf("%s/%s: label %s=%q, want %q (labels %v)", ns, w.Name, k, cm.Labels[k], v, cm.Labels)
			}
		}
		checkOwner(t, cm, fc)
	}
}

// waitNoDashboards waits until ns holds none of the dashboard ConfigMaps.
func waitNoDashboards(t *testing.T, ns string) {
	t.Helper()
	eventually(t, wait, func() error {
		for _, name := range dashboardNames {
			err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("ConfigMap %s/%s still there (err %v)", ns, name, err)
			}
		}
		return nil
	})
}

// TestDashboards: with spec.dashboards enabled the operator deploys the
// Grafana dashboard ConfigMaps, by default in the agent namespace; changing
// spec.dashboards.namespace moves them, disabling deletes them, and neither
// touches other ConfigMaps.
func TestDashboards(t *testing.T) {
	needEnv(t)
	const ns, grafanaNS = "fl-dashboards", "fl-dashboards-grafana"
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: grafanaNS}}); err != nil {
		t.Fatal(err)
	}
	// A dashboard of someone else's, for the same sidecar: never deleted.
	theirs := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "team-dashboard", Namespace: grafanaNS,
			Labels: map[string]string{dashboards.SidecarLabel: dashboards.SidecarLabelValue, render.LabelComponent: render.DashboardsComponent}},
		Data: map[string]string{"team.json": "{}"},
	}
	if err := k8s.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}

	fc := newCollector(ns)
	fc.Spec.Dashboards = &v1alpha1.Dashboards{Enabled: true}
	create(t, fc)
	fc = get(t)
	waitDashboards(t, ns, fc)
	waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected)

	// A dashboard deleted by hand comes back.
	if err := k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: dashboardNames[0], Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	waitDashboards(t, ns, fc)

	// Moved to Grafana's namespace.
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Dashboards.Namespace = grafanaNS }); err != nil {
		t.Fatal(err)
	}
	waitDashboards(t, grafanaNS, fc)
	waitNoDashboards(t, ns)
	waitFor(t, configMap(ns), exists) // the agent's configuration stays

	// Disabled: gone.
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Dashboards.Enabled = false }); err != nil {
		t.Fatal(err)
	}
	waitNoDashboards(t, grafanaNS)
	waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected)
	waitFor(t, configMap(ns), exists)
	waitFor(t, theirs, exists)
}

func ptr[T any](v T) *T { return &v }

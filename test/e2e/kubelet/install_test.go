//go:build e2e_kubelet

package kubelet

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/test/e2e/cluster"
)

const (
	operatorNamespace = "flowlens-system"
	agentNamespace    = "flowlens" // the sample FlowCollector's
	// agentMetricsPort replaces the sample's 9400: the agent is on this
	// machine's network, where other tests run.
	agentMetricsPort = 19400
)

// The agent watches the node's CNI bridge and the pods' veths (the bridge
// plugin names them veth + 8 hex digits), not every interface of this
// machine, where other tests create and watch theirs.
var agentInterfaces = []any{bridgeName, "/^veth[0-9a-f]{8}$/"}

// installOperator applies manifests/flowlens-operator.yaml and waits for
// its Deployment to roll out, as README's step 1.
func installOperator(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	cluster.Apply(ctx, t, c, "flowlens-operator.yaml", nil)
	waitDeployment(ctx, t, c, operatorNamespace, "flowlens-operator")
}

// installFlowCollector applies manifests/flowcollector.yaml (README's step
// 2) with the changes this machine needs, and waits for it to be Ready at
// generation gen with the agent ready on the node.
func installFlowCollector(ctx context.Context, t *testing.T, c client.Client) *v1alpha1.FlowCollector {
	t.Helper()
	cluster.Apply(ctx, t, c, "flowcollector.yaml", func(u *unstructured.Unstructured) {
		must(t, unstructured.SetNestedSlice(u.Object, agentInterfaces, "spec", "agent", "interfaces"))
		must(t, unstructured.SetNestedField(u.Object, int64(agentMetricsPort), "spec", "agent", "metricsPort"))
	})
	return waitFlowCollector(ctx, t, c)
}

// waitFlowCollector waits for the FlowCollector to be Ready on its
// current generation with the agent ready and updated on the one node.
func waitFlowCollector(ctx context.Context, t *testing.T, c client.Client) *v1alpha1.FlowCollector {
	t.Helper()
	fc := &v1alpha1.FlowCollector{}
	cluster.WaitFor(ctx, t, "the FlowCollector to be Ready", 3*time.Minute, func() error {
		if err := c.Get(ctx, client.ObjectKey{Name: "cluster"}, fc); err != nil {
			return err
		}
		r := meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionReady)
		st := fc.Status
		if st.ObservedGeneration != fc.Generation || r == nil || r.Status != metav1.ConditionTrue ||
			st.DesiredAgents != 1 || st.ReadyAgents != 1 || st.UpdatedAgents != 1 {
			return fmt.Errorf("generation %d, status %+v", fc.Generation, st)
		}
		return nil
	})
	return fc
}

// installCollector applies manifests/flowlens-collector.yaml (README's
// step 3) with --output=json instead of none, so that its log has the
// enriched flows, and waits for it to roll out.
func installCollector(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	cluster.Apply(ctx, t, c, "flowlens-collector.yaml", func(u *unstructured.Unstructured) {
		if u.GetKind() != "Deployment" {
			return
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		ctr := containers[0].(map[string]any)
		args := ctr["args"].([]any)
		for i, a := range args {
			if a == "--output=none" {
				args[i] = "--output=json"
			}
		}
		ctr["args"] = append(args, "--pod-labels")
		must(t, unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers"))
	})
	waitDeployment(ctx, t, c, agentNamespace, "flowlens-collector")
}

// agentPod returns the agent's ready pod on the node.
func agentPod(ctx context.Context, t *testing.T, c client.Client) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	cluster.WaitFor(ctx, t, "a ready agent pod", 2*time.Minute, func() error {
		ds := &appsv1.DaemonSet{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: render.AgentName}, ds); err != nil {
			return err
		}
		hash := ds.Spec.Template.Annotations[render.ConfigHashAnnotation]
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(agentNamespace), client.MatchingLabels{render.LabelName: render.AgentName}); err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d agent pods", len(pods.Items))
		}
		p := &pods.Items[0]
		if p.Annotations[render.ConfigHashAnnotation] != hash {
			return fmt.Errorf("pod %s has config hash %s, the DaemonSet %s", p.Name, p.Annotations[render.ConfigHashAnnotation], hash)
		}
		if p.DeletionTimestamp != nil || !podReady(p) {
			return fmt.Errorf("pod %s: deleting %v%s", p.Name, p.DeletionTimestamp != nil, podStates(ctx, c, agentNamespace))
		}
		pod = p
		return nil
	})
	return pod
}

// checkSecurityContext checks that the agent container runs with what
// the operator rendered for this FlowCollector, unchanged: not privileged,
// only the capabilities of render.BaseCapabilities.
func checkSecurityContext(ctx context.Context, t *testing.T, c client.Client, pod *corev1.Pod) {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: render.AgentName}, ds); err != nil {
		t.Fatal(err)
	}
	want := ds.Spec.Template.Spec.Containers[0].SecurityContext
	got := pod.Spec.Containers[0].SecurityContext
	if want == nil || got == nil || got.String() != want.String() {
		t.Fatalf("agent securityContext %v, the DaemonSet's %v", got, want)
	}
	if got.Privileged == nil || *got.Privileged {
		t.Errorf("agent is privileged: %v", got)
	}
	var added []string
	for _, c := range got.Capabilities.Add {
		added = append(added, string(c))
	}
	var base []string
	for _, c := range render.BaseCapabilities {
		base = append(base, string(c))
	}
	if strings.Join(added, ",") != strings.Join(base, ",") {
		t.Errorf("agent capabilities %v, want %v", added, base)
	}
	if got.SeccompProfile == nil || got.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("agent seccomp profile %v, want RuntimeDefault", got.SeccompProfile)
	}
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("agent pod automountServiceAccountToken %v, want false", a)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil {
			t.Errorf("agent pod has a projected volume %s (a service account token?)", v.Name)
		}
	}
	t.Logf("agent runs with %v", got)
}

// checkAgentProcess checks what the kernel says of the agent's process:
// filtered by seccomp (mode 2), with exactly BPF, PERFMON and NET_ADMIN.
func checkAgentProcess(ctx context.Context, t *testing.T, n *node, pod *corev1.Pod) {
	t.Helper()
	pid := n.containerPID(ctx, t, pod.Status.ContainerStatuses[0].ContainerID)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	const capNetAdmin, capPerfmon, capBPF = 12, 38, 39
	want := fmt.Sprintf("%016x", uint64(1)<<capNetAdmin|1<<capPerfmon|1<<capBPF)
	for _, l := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "Seccomp":
			if v != "2" {
				t.Errorf("agent process %d: Seccomp %s, want 2 (filtered)", pid, v)
			}
		case "CapEff", "CapBnd":
			if v != want {
				t.Errorf("agent process %d: %s %s, want %s (BPF, PERFMON, NET_ADMIN)", pid, k, v, want)
			}
		}
	}
}

func waitDeployment(ctx context.Context, t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	cluster.WaitFor(ctx, t, "Deployment "+ns+"/"+name+" to roll out", 3*time.Minute, func() error {
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		if d.Status.ObservedGeneration != d.Generation || d.Status.UpdatedReplicas != 1 || d.Status.ReadyReplicas != 1 || d.Status.Replicas != 1 {
			return fmt.Errorf("status %+v%s", d.Status, podStates(ctx, c, ns))
		}
		return nil
	})
}

// podStates describes the pods of ns, for a wait's error.
func podStates(ctx context.Context, c client.Client, ns string) string {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\npod %s: %s", p.Name, p.Status.Phase)
		for _, s := range p.Status.ContainerStatuses {
			switch {
			case s.State.Waiting != nil:
				fmt.Fprintf(&b, " %s waiting %s: %s", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
			case s.State.Terminated != nil:
				fmt.Fprintf(&b, " %s terminated %s (%d): %s", s.Name, s.State.Terminated.Reason, s.State.Terminated.ExitCode, s.State.Terminated.Message)
			default:
				fmt.Fprintf(&b, " %s ready %v restarts %d", s.Name, s.Ready, s.RestartCount)
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue && cond.Message != "" {
				fmt.Fprintf(&b, " [%s: %s]", cond.Type, cond.Message)
			}
		}
	}
	return b.String()
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return p.Status.Phase == corev1.PodRunning
		}
	}
	return false
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// collectorPod returns the collector's ready pod.
func collectorPod(ctx context.Context, t *testing.T, c client.Client) *corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(agentNamespace), client.MatchingLabels{render.LabelName: "flowlens-collector"}); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; podReady(p) && p.DeletionTimestamp == nil {
			return p
		}
	}
	t.Fatalf("no ready collector pod%s", podStates(ctx, c, agentNamespace))
	return nil
}

// exportToCollector points the FlowCollector's exporter at the collector,
// as README's step 3 says (grpc → flowlens-collector.flowlens.svc:9990,
// resolved by the node's DNS: dns_test.go), and waits for the agent to roll
// to it.
func exportToCollector(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	patch := `{"spec":{"exporters":[{"type":"grpc","grpc":{"targetHost":"flowlens-collector.flowlens.svc","targetPort":9990}}]}}`
	if err := c.Patch(ctx, &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatal(err)
	}
	waitFlowCollector(ctx, t, c)
}

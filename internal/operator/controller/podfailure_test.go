package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// TestConfigFailureCondition: an agent container the kubelet cannot create
// (an exporter's Secret key read into an environment variable is missing)
// makes Ready False with reason ConfigFailed, the pod, the container and the
// kubelet's message, ahead of an earlier FailedMount of the same pod; a new
// message replaces the old; once the pod is ready, the reason goes. Each
// step changes only the pod's status, as the kubelet does after the
// DaemonSet's status change, so the reconciler must watch the pods. envtest
// has no kubelet and no DaemonSet controller: the test writes the pod, its
// status, its event and the DaemonSet's status as they would.
func TestConfigFailureCondition(t *testing.T) {
	needEnv(t)
	const ns = "fl-config"
	ctx := context.Background()
	fc := newCollector(ns)
	fc.Spec.Exporters = otlpExporter(&v1alpha1.OTLPExporter{TargetHost: "otel", TargetPort: 4317,
		HeadersSecretRef: &v1alpha1.SecretRef{Name: "otel-auth"}})
	create(t, fc)
	ds := waitFor(t, agentDaemonSet(ns), exists)

	newPod := func(name string, labels map[string]string, spec corev1.PodSpec) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: spec}
		p.Spec.NodeName = "node-1"
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// setWaiting writes the pod's status as the kubelet does for a
	// container it cannot create.
	setWaiting := func(p *corev1.Pod, container, msg string) {
		t.Helper()
		p.Status = corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: container, Image: p.Spec.Containers[0].Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: msg}}}}}
		if err := k8s.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// waitReady waits until Ready is False with reason and, unless want is
	// "", message want.
	waitReady := func(reason, want string) {
		t.Helper()
		waitFor(t, &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName}}, func(fc *v1alpha1.FlowCollector) error {
			c := meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionReady)
			switch {
			case c == nil:
				return fmt.Errorf("no Ready condition yet")
			case c.Status != metav1.ConditionFalse || c.Reason != reason || (want != "" && c.Message != want):
				return fmt.Errorf("Ready is %s/%s\n%q, want False/%s\n%q", c.Status, c.Reason, c.Message, reason, want)
			}
			return nil
		})
	}

	pod := newPod(render.AgentName+"-x7k2p", ds.Spec.Template.Labels, ds.Spec.Template.Spec)
	container := pod.Spec.Containers[0].Name
	// Not counted: a pod that is not the agent's.
	other := newPod("other", map[string]string{"app": "other"}, corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}}})
	setWaiting(other, "c", `secret "x" not found`)
	setDaemonSetStatus(t, ns, 1, 1, 0)
	waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonAgentsNotReady)

	// An earlier FailedMount of the pod (the Secret of a volume, since
	// created): reported until the pod's status says more.
	e := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name + ".1", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID,
			APIVersion: "v1"},
		Reason: "FailedMount", Message: `MountVolume.SetUp failed for volume "x" : secret "x" not found`,
		Type: corev1.EventTypeWarning, Count: 1, Source: corev1.EventSource{Component: "kubelet", Host: "node-1"},
		FirstTimestamp: metav1.NewTime(time.Now()), LastTimestamp: metav1.NewTime(time.Now()),
	}
	if err := k8s.Create(ctx, e); err != nil {
		t.Fatal(err)
	}
	waitReady(v1alpha1.ReasonMountFailed, "")

	const missingSecret = `secret "otel-auth" not found`
	setWaiting(pod, container, missingSecret)
	want := "0 of 1 agents are ready; an agent container cannot start (does the Secret and its key exist in fl-config?): pod " +
		pod.Name + ": container " + container + ": " + missingSecret
	waitReady(v1alpha1.ReasonConfigFailed, want)

	// The Secret created without the key: the kubelet's new message.
	const missingKey = `couldn't find key headers in Secret fl-config/otel-auth`
	setWaiting(pod, container, missingKey)
	want = "0 of 1 agents are ready; an agent container cannot start (does the Secret and its key exist in fl-config?): pod " +
		pod.Name + ": container " + container + ": " + missingKey
	waitReady(v1alpha1.ReasonConfigFailed, want)

	// The key added, the container starts and the pod is ready: the reason
	// goes with the pod's status alone (the DaemonSet still says 0 ready),
	// then the DaemonSet catches up.
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: container, Image: pod.Spec.Containers[0].Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitReady(v1alpha1.ReasonAgentsNotReady, "0 of 1 agents are ready")
	setDaemonSetStatus(t, ns, 1, 1, 1)
	waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAgentsReady)
}

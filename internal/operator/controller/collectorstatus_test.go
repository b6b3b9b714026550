package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// TestCollectorReadyCondition: with a kafka exporter the status reports the
// Kafka collectors in CollectorReady and the collector counters, apart from
// Ready, which stays the agents': RollingOut while the Deployment controller
// has not caught up, then while old pods remain; CollectorsNotReady;
// MountFailed with the kubelet's latest FailedMount of a collector pod that
// is not ready; ConfigFailed with the pod, the container and the kubelet's
// message; CollectorsReady; and the condition goes with the exporter. The
// failures come after the Deployment's status, each from the pod's event or
// status alone, so the reconciler must cache and watch the collector pods
// and their events. envtest has no kubelet and no Deployment controller:
// the test writes the pods, their status, the event and the Deployment's
// status as they would.
func TestCollectorReadyCondition(t *testing.T) {
	needEnv(t)
	const ns = "fl-collector-ready"
	ctx := context.Background()
	fc := newCollector(ns)
	fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: []string{"kafka:9092"},
		SASL: &v1alpha1.KafkaSASL{Mechanism: v1alpha1.KafkaSASLScram512, SecretRef: v1alpha1.SecretRef{Name: "kafka-user"}}})
	fc.Spec.Collector.Replicas = 2
	fc.Spec.Collector.MetricsTLS = &v1alpha1.MetricsTLS{ServerSecretRef: v1alpha1.SecretRef{Name: "collector-cert"}}
	create(t, fc)
	dep := waitFor(t, collectorDeployment(ns), exists)

	// waitCollectors waits until CollectorReady has status, reason and
	// message, for the current generation, with the counters.
	waitCollectors := func(status metav1.ConditionStatus, reason, msg string, desired, updated, ready int32) *v1alpha1.FlowCollector {
		t.Helper()
		waitCondition(t, v1alpha1.ConditionCollectorReady, status, reason)
		return waitFor(t, &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName}}, func(fc *v1alpha1.FlowCollector) error {
			s := fc.Status
			c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionCollectorReady)
			switch {
			case c == nil || c.Status != status || c.Reason != reason || c.Message != msg:
				return fmt.Errorf("CollectorReady %+v, want %s/%s\n%q", c, status, reason, msg)
			case s.DesiredCollectors != desired || s.UpdatedCollectors != updated || s.ReadyCollectors != ready:
				return fmt.Errorf("collectors desired %d updated %d ready %d, want %d %d %d",
					s.DesiredCollectors, s.UpdatedCollectors, s.ReadyCollectors, desired, updated, ready)
			}
			return nil
		})
	}
	// The Deployment controller has not seen it yet.
	waitCollectors(metav1.ConditionFalse, v1alpha1.ReasonRollingOut,
		"waiting for the Deployment controller to see the new collector configuration", 2, 0, 0)

	// Ready is the agents' alone: True while the collectors are not.
	setDaemonSetStatus(t, ns, 1, 1, 1)
	waitCondition(t, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAgentsReady)
	if c := meta.FindStatusCondition(get(t).Status.Conditions, v1alpha1.ConditionCollectorReady); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("CollectorReady %+v, want False beside Ready True", c)
	}

	// The ReplicaSet's pods: one ready, one that cannot mount its Secret.
	readyPod := collectorPod(t, dep, "5d8f7c9b4-a1b2c")
	setPodReady(t, readyPod)
	pod := collectorPod(t, dep, "5d8f7c9b4-x7k2p")
	setPodWaiting(t, pod, "", "")

	setDeploymentStatus(t, ns, 2, 1, 1)
	waitCollectors(metav1.ConditionFalse, v1alpha1.ReasonRollingOut, "1 of 2 collectors run the current configuration", 2, 1, 1)
	// An old pod the Deployment keeps until the new ones are ready.
	setDeploymentStatus(t, ns, 3, 2, 2)
	waitCollectors(metav1.ConditionFalse, v1alpha1.ReasonRollingOut,
		"3 collector pods for 2 replicas: waiting for the Deployment to remove the others", 2, 2, 2)
	setDeploymentStatus(t, ns, 2, 2, 1)
	waitCollectors(metav1.ConditionFalse, v1alpha1.ReasonCollectorsNotReady, "1 of 2 collectors are ready", 2, 2, 1)

	// Not counted, though later: a FailedMount of a pod that is not a
	// collector, and one of the ready collector pod.
	now := time.Now()
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}, Spec: corev1.PodSpec{
		NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}}}}
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	failedMountEvent(t, other, "other.1", `MountVolume.SetUp failed for volume "x" : secret "x" not found`, now.Add(time.Minute))
	failedMountEvent(t, readyPod, readyPod.Name+".1", `MountVolume.SetUp failed for volume "metrics-tls" : resolved since`, now.Add(time.Minute))
	// The collector pod's, after the Deployment's status.
	const mountMsg = `MountVolume.SetUp failed for volume "metrics-tls" : secret "collector-cert" not found`
	failedMountEvent(t, pod, pod.Name+".1", mountMsg, now)
	waitCollectors(metav1.ConditionFalse, v1alpha1.ReasonMountFailed, "1 of 2 collectors are ready; a collector cannot mount a volume "+
		"(does the Secret exist in fl-collector-ready?): pod "+pod.Name+": "+mountMsg, 2, 2, 1)
	if c := meta.FindStatusCondition(get(t).Status.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v: a collector's failure is not the agents'", c)
	}

	// The Secret created, the kubelet cannot create the container: the
	// SASL Secret lacks the username.
	const configMsg = `couldn't find key username in Secret fl-collector-ready/kafka-user`
	setPodWaiting(t, pod, createContainerConfigError, configMsg)
	waitCollectors(metav1.ConditionFalse, v1alpha1.ReasonConfigFailed, "1 of 2 collectors are ready; a collector container cannot start "+
		"(does the Secret and its key exist in fl-collector-ready?): pod "+pod.Name+": container collector: "+configMsg, 2, 2, 1)

	// The key added: the pod's readiness alone clears the reason, then the
	// Deployment catches up.
	setPodReady(t, pod)
	waitCollectors(metav1.ConditionFalse, v1alpha1.ReasonCollectorsNotReady, "1 of 2 collectors are ready", 2, 2, 1)
	setDeploymentStatus(t, ns, 2, 2, 2)
	waitCollectors(metav1.ConditionTrue, v1alpha1.ReasonCollectorsReady, "2 of 2 collectors are ready", 2, 2, 2)

	// The kafka exporter removed: the condition and the counters go.
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Exporters = nil }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName}}, func(fc *v1alpha1.FlowCollector) error {
		s := fc.Status
		if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionCollectorReady); c != nil || s.ObservedGeneration != fc.Generation ||
			s.DesiredCollectors != 0 || s.UpdatedCollectors != 0 || s.ReadyCollectors != 0 {
			return fmt.Errorf("status without kafka: %+v", s)
		}
		return nil
	})
}

func collectorDeployment(ns string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName, Namespace: ns}}
}

// setDeploymentStatus writes the Kafka collector Deployment's status, as
// its controller would, for its current generation: replicas pods, of
// which updated run the current template and ready are ready.
func setDeploymentStatus(t *testing.T, ns string, replicas, updated, ready int32) {
	t.Helper()
	d := waitFor(t, collectorDeployment(ns), exists)
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            replicas,
		UpdatedReplicas:     updated,
		ReadyReplicas:       ready,
		AvailableReplicas:   ready,
		UnavailableReplicas: replicas - ready,
	}
	if err := k8s.Status().Update(context.Background(), d); err != nil {
		t.Fatalf("writing the Deployment status: %v", err)
	}
}

// collectorPod creates a pod of d's template, named as its ReplicaSet
// names them (suffix: the template hash and the pod's own).
func collectorPod(t *testing.T, d *appsv1.Deployment, suffix string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-" + suffix, Namespace: d.Namespace, Labels: d.Spec.Template.Labels},
		Spec: d.Spec.Template.Spec}
	p.Spec.NodeName = "node-1"
	if err := k8s.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// setPodWaiting writes p's status as the kubelet does for a container that
// waits, with reason and message (ContainerCreating while it mounts the
// volumes when reason is "").
func setPodWaiting(t *testing.T, p *corev1.Pod, reason, msg string) {
	t.Helper()
	if reason == "" {
		reason = "ContainerCreating"
	}
	c := p.Spec.Containers[0]
	p.Status = corev1.PodStatus{Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}}
	if err := k8s.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// setPodReady writes p's status as the kubelet does once its container runs
// and passes its readiness probe.
func setPodReady(t *testing.T, p *corev1.Pod) {
	t.Helper()
	c := p.Spec.Containers[0]
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	if err := k8s.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// failedMountEvent creates the kubelet's FailedMount event name of pod p,
// last seen at.
func failedMountEvent(t *testing.T, p *corev1.Pod, name, msg string, at time.Time) {
	t.Helper()
	e := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID,
			APIVersion: "v1"},
		Reason: failedMount, Message: msg, Type: corev1.EventTypeWarning, Count: 1,
		Source:         corev1.EventSource{Component: "kubelet", Host: "node-1"},
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at),
	}
	if err := k8s.Create(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

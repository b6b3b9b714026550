package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// A pod whose Secret does not exist (a typo in spec.agent.metricsTLS,
// spec.collector.metricsTLS or an exporter's secretRef, a Secret in another
// namespace) never starts, and its DaemonSet's or Deployment's status only
// says it is not ready. The kubelet says why in two places, and the
// reconciler puts it in the workload's condition (Ready for the agents,
// CollectorReady for the Kafka collectors):
//
//   - a Secret mounted as a volume: a FailedMount event of the pod (reason
//     MountFailed), the latest one of a pod that is not ready;
//   - a Secret key read into an environment variable (an exporter's SASL
//     credentials or OTLP headers): the container stays Waiting with reason
//     CreateContainerConfigError and the kubelet's message in the pod's
//     status (reason ConfigFailed).
//
// It reads events and pods, not Secrets: the operator has no right to read
// Secrets, and needs none.

// failedMount is the reason of the kubelet's events for a volume it cannot
// mount, e.g. `MountVolume.SetUp failed for volume "metrics-tls" : secret
// "x" not found`.
const failedMount = "FailedMount"

// createContainerConfigError is the waiting reason the kubelet gives a
// container it cannot create because its config does not resolve, e.g.
// `secret "x" not found` or `couldn't find key user in Secret ns/x`.
const createContainerConfigError = "CreateContainerConfigError"

// A workload is a set of pods the operator runs and reports in a condition.
type workload struct {
	// name is the DaemonSet's or Deployment's name, its pods' LabelName and
	// the prefix of their names.
	name string
	// one names one of its pods in messages: "an agent".
	one string
}

var (
	agents     = workload{name: render.AgentName, one: "an agent"}
	collectors = workload{name: render.CollectorName, one: "a collector"}
	workloads  = []workload{agents, collectors}
)

// podLabels select w's pods (its DaemonSet's or Deployment's selector).
func (w workload) podLabels() labels.Set {
	return labels.Set{render.LabelName: w.name, render.LabelPartOf: "flowlens"}
}

// ownsPodName reports whether a pod named name may be one of w's: the
// DaemonSet and the Deployment (through its ReplicaSets) name their pods
// with their own name and a dash first.
func (w workload) ownsPodName(name string) bool {
	return strings.HasPrefix(name, w.name+"-")
}

// failedMountCache is the manager cache's selection of Events: only the
// kubelet's FailedMount events of pods, so that the cache holds few.
func failedMountCache() cache.ByObject {
	return cache.ByObject{Field: fields.AndSelectors(
		fields.OneTermEqualSelector("reason", failedMount),
		fields.OneTermEqualSelector("involvedObject.kind", "Pod"))}
}

// podCache is the manager cache's selection of Pods: the workloads' only
// (a label selector names each of them).
func podCache() cache.ByObject {
	names := make([]string, len(workloads))
	for i, w := range workloads {
		names[i] = w.name
	}
	name, err := labels.NewRequirement(render.LabelName, selection.In, names)
	if err != nil {
		panic(err) // constant, valid label values
	}
	return cache.ByObject{Label: labels.SelectorFromSet(labels.Set{render.LabelPartOf: "flowlens"}).Add(*name)}
}

// enqueueCollector maps any object to the FlowCollector singleton.
var enqueueCollector = handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: v1alpha1.SingletonName}}}
})

// failedMountEvents reconciles the FlowCollector when the kubelet reports a
// FailedMount for a pod named like a workload's: the event comes after the
// DaemonSet or Deployment status change that created the pod, so nothing
// else would.
func failedMountEvents() (client.Object, handler.EventHandler, builder.WatchesOption) {
	workloadPod := func(obj client.Object) bool {
		e, ok := obj.(*corev1.Event)
		if !ok {
			return false
		}
		for _, w := range workloads {
			if w.ownsPodName(e.InvolvedObject.Name) {
				return true
			}
		}
		return false
	}
	return &corev1.Event{}, enqueueCollector, builder.WithPredicates(predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return workloadPod(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return workloadPod(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	})
}

// podChanges reconciles the FlowCollector when a workload's pod (the cache
// holds no others) changes in a way the conditions read: the kubelet sets
// the waiting reason after the DaemonSet or Deployment status change that
// created the pod, so nothing else would. The pods are watched, rather than
// the kubelet's `Failed` events widened into the event cache: field
// selectors cannot OR reasons, so that cache would hold every pod event of
// the cluster, while the workloads' pods are few (one agent a node, the
// collector replicas), selected by label, and their status is the current
// truth (an event outlives the failure). Only changes of what the
// reconciler reads (readiness, deletion, the config failure) pass, not
// every status write of the kubelet.
func podChanges() (client.Object, handler.EventHandler, builder.WatchesOption) {
	state := func(obj client.Object) string {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return ""
		}
		return fmt.Sprintf("ready=%t deleting=%t %s", podReady(p), !p.DeletionTimestamp.IsZero(), configFailure(p))
	}
	return &corev1.Pod{}, enqueueCollector, builder.WithPredicates(predicate.Funcs{
		// A new pod counts: its FailedMount event may reach the event
		// cache before the pod reaches the pod cache.
		CreateFunc:  func(event.CreateEvent) bool { return true },
		UpdateFunc:  func(e event.UpdateEvent) bool { return state(e.ObjectOld) != state(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	})
}

// podFailures are why pods of a workload that are not ready cannot start,
// as the kubelet says; "" when it says nothing.
type podFailures struct {
	// config: the first such pod (by name) with a container the kubelet
	// cannot create, "pod NAME: container C: MESSAGE".
	config string
	// mount: the latest FailedMount of such a pod, "pod NAME: MESSAGE".
	mount string
}

// podFailures returns why w's pods in ns that are not ready cannot start.
// Pods that became ready since (the Secret appeared) do not count.
func (r *FlowCollectorReconciler) podFailures(ctx context.Context, ns string, w workload) (podFailures, error) {
	// The cache holds the workloads' pods, and every change of what is
	// read here triggers a reconcile (podChanges), so a stale read is
	// corrected by the next one.
	var f podFailures
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(w.podLabels())); err != nil {
		return f, fmt.Errorf("listing the %s pods: %w", w.name, err)
	}
	waiting := map[string]bool{}
	configPod := ""
	for i := range pods.Items {
		p := &pods.Items[i]
		if !p.DeletionTimestamp.IsZero() || podReady(p) {
			continue
		}
		waiting[string(p.UID)] = true
		if c := configFailure(p); c != "" && (configPod == "" || p.Name < configPod) {
			configPod, f.config = p.Name, fmt.Sprintf("pod %s: %s", p.Name, c)
		}
	}
	if len(waiting) == 0 {
		return f, nil
	}
	var events corev1.EventList
	if err := r.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
		return f, fmt.Errorf("listing the %s pods' events: %w", w.name, err)
	}
	var latest *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if e.Reason == failedMount && waiting[string(e.InvolvedObject.UID)] && (latest == nil || lastSeen(e).After(lastSeen(latest))) {
			latest = e
		}
	}
	if latest != nil {
		f.mount = fmt.Sprintf("pod %s: %s", latest.InvolvedObject.Name, latest.Message)
	}
	return f, nil
}

// explain puts into c, w's readiness condition, why a pod of w in ns cannot
// start, when c is False and the kubelet said. A config failure comes
// first: it is the pod's current status, and the kubelet creates
// containers only once every volume is mounted, so a FailedMount event of
// the same pod is from before.
func (f podFailures) explain(c *metav1.Condition, w workload, ns string) {
	switch {
	case c.Status == metav1.ConditionTrue:
	case f.config != "":
		c.Reason = v1alpha1.ReasonConfigFailed
		c.Message += fmt.Sprintf("; %s container cannot start (does the Secret and its key exist in %s?): %s", w.one, ns, f.config)
	case f.mount != "":
		c.Reason = v1alpha1.ReasonMountFailed
		c.Message += fmt.Sprintf("; %s cannot mount a volume (does the Secret exist in %s?): %s", w.one, ns, f.mount)
	}
}

// configFailure returns "container NAME: MESSAGE" for the first container
// of p (init containers first) that the kubelet cannot create, or "".
func configFailure(p *corev1.Pod) string {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, c := range list {
			if w := c.State.Waiting; w != nil && w.Reason == createContainerConfigError {
				return fmt.Sprintf("container %s: %s", c.Name, w.Message)
			}
		}
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// lastSeen is when the event last happened: the kubelet's core/v1 events
// set LastTimestamp; events.k8s.io writers set EventTime, and Series when
// it repeats.
func lastSeen(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/controller/render"
)

// An agent pod whose Secret does not exist (a typo in spec.agent.metricsTLS
// or an exporter's secretRef, a Secret in another namespace) never starts,
// and the DaemonSet's status only says it is not ready. The kubelet says why
// in two places, and the reconciler puts it in the Ready condition:
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

// agentPodLabels select the agent pods (the DaemonSet's selector).
var agentPodLabels = labels.Set{render.LabelName: render.AgentName, render.LabelPartOf: "flowlens"}

// failedMountCache is the manager cache's selection of Events: only the
// kubelet's FailedMount events of pods, so that the cache holds few.
func failedMountCache() cache.ByObject {
	return cache.ByObject{Field: fields.AndSelectors(
		fields.OneTermEqualSelector("reason", failedMount),
		fields.OneTermEqualSelector("involvedObject.kind", "Pod"))}
}

// agentPodCache is the manager cache's selection of Pods: the agents' only.
func agentPodCache() cache.ByObject {
	return cache.ByObject{Label: labels.SelectorFromSet(agentPodLabels)}
}

// enqueueCollector maps any object to the FlowCollector singleton.
var enqueueCollector = handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: v1alpha1.SingletonName}}}
})

// failedMountEvents reconciles the FlowCollector when the kubelet reports a
// FailedMount for a pod named like the agent's: the event comes after the
// DaemonSet status change that created the pod, so nothing else would.
func failedMountEvents() (client.Object, handler.EventHandler, builder.WatchesOption) {
	agentPod := func(obj client.Object) bool {
		e, ok := obj.(*corev1.Event)
		return ok && strings.HasPrefix(e.InvolvedObject.Name, render.AgentName+"-")
	}
	return &corev1.Event{}, enqueueCollector, builder.WithPredicates(predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return agentPod(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return agentPod(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	})
}

// agentPodChanges reconciles the FlowCollector when an agent pod changes in
// a way the Ready condition reads: the kubelet sets the waiting reason after
// the DaemonSet status change that created the pod, so nothing else would.
// The pods are watched, rather than the kubelet's `Failed` events widened
// into the event cache: field selectors cannot OR reasons, so that cache
// would hold every pod event of the cluster, while the agent pods are few
// (one a node), selected by label, and their status is the current truth
// (an event outlives the failure). Only changes of what the reconciler reads
// (readiness, deletion, the config failure) pass, not every status write of
// the kubelet.
func agentPodChanges() (client.Object, handler.EventHandler, builder.WatchesOption) {
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

// agentFailures returns why agent pods in ns that are not ready cannot
// start, as "pod NAME: ..." or "": config is the first such pod (by name)
// with a container the kubelet cannot create ("pod NAME: container C:
// MESSAGE"), mount the latest FailedMount of such a pod ("pod NAME:
// MESSAGE"). Pods that became ready since (the Secret appeared) do not
// count.
func (r *FlowCollectorReconciler) agentFailures(ctx context.Context, ns string) (config, mount string, err error) {
	// The cache holds the agent pods, and every change of what is read
	// here triggers a reconcile (agentPodChanges), so a stale read is
	// corrected by the next one.
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(agentPodLabels)); err != nil {
		return "", "", fmt.Errorf("listing the agent pods: %w", err)
	}
	waiting := map[string]bool{}
	configPod := ""
	for i := range pods.Items {
		p := &pods.Items[i]
		if !p.DeletionTimestamp.IsZero() || podReady(p) {
			continue
		}
		waiting[string(p.UID)] = true
		if f := configFailure(p); f != "" && (configPod == "" || p.Name < configPod) {
			configPod, config = p.Name, fmt.Sprintf("pod %s: %s", p.Name, f)
		}
	}
	if len(waiting) == 0 {
		return "", "", nil
	}
	var events corev1.EventList
	if err := r.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
		return "", "", fmt.Errorf("listing the agent pods' events: %w", err)
	}
	var latest *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if e.Reason == failedMount && waiting[string(e.InvolvedObject.UID)] && (latest == nil || lastSeen(e).After(lastSeen(latest))) {
			latest = e
		}
	}
	if latest != nil {
		mount = fmt.Sprintf("pod %s: %s", latest.InvolvedObject.Name, latest.Message)
	}
	return config, mount, nil
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

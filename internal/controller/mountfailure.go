package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
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
// in a FailedMount event of the pod: the reconciler puts the latest one in
// the Ready condition (reason MountFailed). It reads events, not Secrets:
// the operator has no right to read Secrets, and needs none.

// failedMount is the reason of the kubelet's events for a volume it cannot
// mount, e.g. `MountVolume.SetUp failed for volume "metrics-tls" : secret
// "x" not found`.
const failedMount = "FailedMount"

// failedMountCache is the manager cache's selection of Events: only the
// kubelet's FailedMount events of pods, so that the cache holds few.
func failedMountCache() cache.ByObject {
	return cache.ByObject{Field: fields.AndSelectors(
		fields.OneTermEqualSelector("reason", failedMount),
		fields.OneTermEqualSelector("involvedObject.kind", "Pod"))}
}

// failedMountEvents reconciles the FlowCollector when the kubelet reports a
// FailedMount for a pod named like the agent's: the event comes after the
// DaemonSet status change that created the pod, so nothing else would.
func failedMountEvents() (client.Object, handler.EventHandler, builder.WatchesOption) {
	agentPod := func(obj client.Object) bool {
		e, ok := obj.(*corev1.Event)
		return ok && strings.HasPrefix(e.InvolvedObject.Name, render.AgentName+"-")
	}
	enqueue := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: v1alpha1.SingletonName}}}
	})
	return &corev1.Event{}, enqueue, builder.WithPredicates(predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return agentPod(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return agentPod(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	})
}

// mountFailure returns the latest FailedMount of an agent pod in ns that is
// not ready, as "pod NAME: MESSAGE", or "" when there is none. Pods that
// became ready since (the Secret appeared) do not count.
func (r *FlowCollectorReconciler) mountFailure(ctx context.Context, ns string) (string, error) {
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(ns),
		client.MatchingLabels{render.LabelName: render.AgentName, render.LabelPartOf: "flowlens"}); err != nil {
		return "", fmt.Errorf("listing the agent pods: %w", err)
	}
	waiting := map[string]bool{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp.IsZero() && !podReady(p) {
			waiting[string(p.UID)] = true
		}
	}
	if len(waiting) == 0 {
		return "", nil
	}
	var events corev1.EventList
	if err := r.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
		return "", fmt.Errorf("listing the agent pods' events: %w", err)
	}
	var latest *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if e.Reason == failedMount && waiting[string(e.InvolvedObject.UID)] && (latest == nil || lastSeen(e).After(lastSeen(latest))) {
			latest = e
		}
	}
	if latest == nil {
		return "", nil
	}
	return fmt.Sprintf("pod %s: %s", latest.InvolvedObject.Name, latest.Message), nil
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

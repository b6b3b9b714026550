package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// The Kafka collectors' part of the status: the CollectorReady condition and
// the collector counters, while a kafka exporter makes the operator run
// them. Ready stays the agents' alone (docs/operator.md, Status, says why).

// collectorState is what the status says of the Kafka collectors.
type collectorState struct {
	replicas int32              // spec.collector.replicas
	dep      *appsv1.Deployment // nil until it exists
	failures podFailures        // when some collector pods are not ready
}

// readCollectors reads the Kafka collectors' Deployment in spec.Namespace
// and, when applied says it is the spec's, why its pods that are not ready
// cannot start. It returns nil without a kafka exporter.
func (r *FlowCollectorReconciler) readCollectors(ctx context.Context, spec *v1alpha1.FlowCollectorSpec, applied bool) (*collectorState, error) {
	if render.Kafka(spec) == nil {
		return nil, nil
	}
	cs := &collectorState{replicas: spec.Collector.Replicas}
	dep := &appsv1.Deployment{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: spec.Namespace, Name: render.CollectorName}, dep); {
	case apierrors.IsNotFound(err):
		return cs, nil
	case err != nil:
		return nil, fmt.Errorf("reading the kafka collector deployment: %w", err)
	}
	cs.dep = dep
	// Some pod is not ready, or missing: old pods of a rollout count, since
	// the Deployment keeps a ready old pod while a new one cannot start.
	if st := dep.Status; applied && (st.ReadyReplicas < st.Replicas || st.ReadyReplicas < cs.replicas) {
		var err error
		if cs.failures, err = r.podFailures(ctx, spec.Namespace, collectors); err != nil {
			return nil, err
		}
	}
	return cs, nil
}

// setCollectorStatus writes the collector counters and the CollectorReady
// condition of generation gen into s, from cs (nil: no collectors, the
// condition goes) and the reconcile's outcome o.
func setCollectorStatus(s *v1alpha1.FlowCollectorStatus, cs *collectorState, o outcome, ns string, gen int64) {
	s.DesiredCollectors, s.ReadyCollectors, s.UpdatedCollectors = 0, 0, 0
	if cs == nil {
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionCollectorReady)
		return
	}
	s.DesiredCollectors = cs.replicas
	if cs.dep != nil {
		s.ReadyCollectors, s.UpdatedCollectors = cs.dep.Status.ReadyReplicas, cs.dep.Status.UpdatedReplicas
	}
	c := metav1.Condition{Type: v1alpha1.ConditionCollectorReady, Status: metav1.ConditionFalse, ObservedGeneration: gen}
	if !o.applied() {
		c.Reason, c.Message = o.notApplied()
	} else {
		c.Status, c.Reason, c.Message = deploymentReadiness(cs.dep, cs.replicas, o.collectorHash)
		cs.failures.explain(&c, collectors, ns)
	}
	meta.SetStatusCondition(&s.Conditions, c)
}

// deploymentReadiness says whether replicas collectors run the pod template
// with config hash hash and are ready, and nothing else runs: the
// Deployment's rollout is complete.
func deploymentReadiness(d *appsv1.Deployment, replicas int32, hash string) (metav1.ConditionStatus, string, string) {
	if d == nil {
		return metav1.ConditionFalse, v1alpha1.ReasonRollingOut, "waiting for the collector Deployment to be created"
	}
	st := d.Status
	switch {
	case d.Spec.Template.Annotations[render.ConfigHashAnnotation] != hash || st.ObservedGeneration < d.Generation:
		return metav1.ConditionFalse, v1alpha1.ReasonRollingOut, "waiting for the Deployment controller to see the new collector configuration"
	case st.UpdatedReplicas < replicas:
		return metav1.ConditionFalse, v1alpha1.ReasonRollingOut,
			fmt.Sprintf("%d of %d collectors run the current configuration", st.UpdatedReplicas, replicas)
	case st.Replicas > replicas:
		// Pods of the previous configuration, which the Deployment keeps
		// until the new ones are ready, or a scale-down.
		return metav1.ConditionFalse, v1alpha1.ReasonRollingOut,
			fmt.Sprintf("%d collector pods for %d replicas: waiting for the Deployment to remove the others", st.Replicas, replicas)
	case st.ReadyReplicas < replicas:
		return metav1.ConditionFalse, v1alpha1.ReasonCollectorsNotReady,
			fmt.Sprintf("%d of %d collectors are ready", st.ReadyReplicas, replicas)
	}
	return metav1.ConditionTrue, v1alpha1.ReasonCollectorsReady,
		fmt.Sprintf("%d of %d collectors are ready", st.ReadyReplicas, replicas)
}

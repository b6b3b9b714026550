// Package controller holds the FlowCollector reconciler: it renders the
// FlowCollector into the agent's namespace, ServiceAccount, RBAC, ConfigMap,
// metrics Service and DaemonSet, the Kafka collector Deployment (and its
// ServiceAccount, RBAC, metrics Service and ConfigMap) with a kafka
// exporter, and the Grafana dashboard ConfigMaps when asked (package
// render), applies them with server-side apply, deletes the Kafka collector
// and dashboard ConfigMaps no longer wanted, and reports the DaemonSet's
// progress in the FlowCollector's status (Ready), and the Kafka collector
// Deployment's (CollectorReady, collectorstatus.go), with the kubelet's
// reason when a pod cannot mount a volume or create a container
// (podfailure.go). security.go keeps the certificates (package certs, or a
// cert-manager Certificate) and the NetworkPolicies of the agent namespace,
// and the reconcile requeues itself for the next certificate renewal.
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// FieldOwner is the server-side apply field manager of everything the
// operator applies. Fields it does not set stay with their managers, so the
// operator does not fight other controllers (or kubectl) over them.
const FieldOwner = "flowlens-operator"

// conflictRetry is how soon a reconcile whose status update lost a race is
// retried.
const conflictRetry = 200 * time.Millisecond

// FlowCollectorReconciler reconciles the FlowCollector singleton.
type FlowCollectorReconciler struct {
	// Client reads from the manager's cache, which holds only objects
	// labelled as managed by the operator (see CacheByObject), and writes to
	// the API server.
	Client client.Client
	// APIReader reads from the API server directly: the agent namespace may
	// exist without the operator's label, and so be absent from the cache.
	APIReader client.Reader
	// DefaultImage is the agent image when spec.agent.image is empty.
	DefaultImage string
	// DefaultCollectorImage is the Kafka collector's image when
	// spec.collector.image is empty.
	DefaultCollectorImage string
	// Certs keeps the certificates (security.go); nil: a certs.Manager
	// with the defaults, on Client and APIReader.
	Certs *certs.Manager

	// security remembers when the certificates and the NetworkPolicies
	// were last brought in line, so that the reconciles the agents' status
	// changes trigger do not read them (and list the nodes) every time.
	security securityMemo
}

// +kubebuilder:rbac:groups=flowlens.io,resources=flowcollectors,verbs=get;list;watch
// +kubebuilder:rbac:groups=flowlens.io,resources=flowcollectors/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=flowlens.io,resources=flowcollectors/finalizers,verbs=update
//
// Cluster-wide, the operator reads (its cache watches the kinds it owns,
// filtered by its label) and writes only named objects: the namespace
// flowlens (when it creates it), the dashboard ConfigMaps (in
// spec.dashboards.namespace, any), the Kafka collector's and the agents'
// export ClusterRole and ClusterRoleBinding. create cannot be limited to
// names (the name is not known when RBAC decides). Its writes of the agent
// namespace's objects are a Role there (package agentns).
// +kubebuilder:rbac:groups="",resources=namespaces;serviceaccounts;configmaps;services,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=create
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=patch,resourceNames=flowlens
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=patch;delete,resourceNames=flowlens-dashboard-traffic;flowlens-dashboard-drops-latency;flowlens-dashboard-agent-health;flowlens-dashboard-service-map
// +kubebuilder:rbac:groups=apps,resources=daemonsets;deployments,verbs=get;list;watch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings,verbs=patch;delete,resourceNames=flowlens-collector-kafka;flowlens-agent-export
//
// The Kafka collector's ClusterRole grants these; RBAC lets the operator
// grant only rights it holds.
// +kubebuilder:rbac:groups="",resources=pods;services;nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch
//
// Likewise the rights of the ClusterRole flowlens-agent-export (create on
// the FlowCollector's flows) and, with spec.collector.serveGRPC, the Kafka
// collector's reviews: the operator holds what it grants, no escalate.
// +kubebuilder:rbac:groups=flowlens.io,resources=flowcollectors/flows,verbs=create,resourceNames=cluster
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
//
// The kubelet's FailedMount events of the agent and Kafka collector pods,
// for the Ready and CollectorReady conditions (podfailure.go); those pods
// are read and watched, for their containers' waiting reasons, with the
// rights above.
// +kubebuilder:rbac:groups="",resources=events,verbs=get;list;watch

// Reconcile brings the agent's objects in line with the FlowCollector and
// updates its status. An invalid spec is reported in the Degraded condition
// and is not retried (the next spec change triggers a new reconcile); API
// errors are returned, so they are retried with backoff.
func (r *FlowCollectorReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fc := &v1alpha1.FlowCollector{}
	if err := r.Client.Get(ctx, req.NamespacedName, fc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the garbage collector removes the owned objects
	}
	defaulted := fc.DeepCopy()
	defaulted.Spec = render.WithDefaults(fc.Spec)
	spec := &defaulted.Spec

	var st outcome
	if err := render.Validate(spec); err != nil {
		st.invalid = err
	} else if objs, err := r.apply(ctx, defaulted); err != nil {
		st.applyErr = err
	} else {
		st.hash = objs.ConfigHash
		st.certsDue = objs.CertsDue
		if objs.Collector != nil {
			st.collectorHash = objs.Collector.ConfigHash
		}
	}
	applied := st.applied()

	ds := &appsv1.DaemonSet{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: spec.Namespace, Name: render.AgentName}, ds); {
	case apierrors.IsNotFound(err):
		ds = nil
	case err != nil:
		return ctrl.Result{}, err
	}
	if ds != nil && applied && ds.Status.NumberReady < ds.Status.DesiredNumberScheduled {
		var err error
		if st.agentFailures, err = r.podFailures(ctx, spec.Namespace, agents); err != nil {
			return ctrl.Result{}, err
		}
	}
	cs, err := r.readCollectors(ctx, spec, applied)
	if err != nil {
		return ctrl.Result{}, err
	}

	if err := r.updateStatus(ctx, fc, spec.Namespace, ds, cs, st); err != nil {
		if apierrors.IsConflict(err) {
			// The FlowCollector changed since the cache saw it; the change
			// queues a new reconcile, and this retry covers a stale cache.
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, err
	}
	if st.applyErr != nil {
		return ctrl.Result{}, st.applyErr
	}
	if st.invalid != nil {
		log.FromContext(ctx).Info("invalid FlowCollector spec", "error", st.invalid.Error())
	}
	if !st.certsDue.IsZero() {
		// The next certificate renewal (certs.Manager says when).
		return ctrl.Result{RequeueAfter: max(time.Until(st.certsDue), time.Second)}, nil
	}
	return ctrl.Result{}, nil
}

// outcome is what one reconcile did, from which the status is computed.
type outcome struct {
	invalid       error     // the spec failed Validate: nothing was applied
	applyErr      error     // the API server refused an object
	hash          string    // config hash of the applied DaemonSet template
	collectorHash string    // config hash of the applied Kafka collector template, if any
	certsDue      time.Time // when the certificates are to be checked again
	// agentFailures are why agent pods that are not ready cannot start.
	agentFailures podFailures
}

// applied reports whether the reconcile applied the objects.
func (o outcome) applied() bool { return o.invalid == nil && o.applyErr == nil }

// notApplied is the reason and message of a readiness condition (Ready,
// CollectorReady) when the reconcile applied nothing: Degraded says why.
func (o outcome) notApplied() (reason, message string) {
	if o.invalid != nil {
		return v1alpha1.ReasonInvalidSpec, "the spec is invalid: see the Degraded condition"
	}
	return v1alpha1.ReasonApplyFailed, "the objects could not be applied: see the Degraded condition"
}

// apply renders and applies every object, the namespace first and the
// dashboards last, then deletes the dashboard ConfigMaps no longer wanted. It
// returns what it applied (their config hashes).
func (r *FlowCollectorReconciler) apply(ctx context.Context, fc *v1alpha1.FlowCollector) (*render.Objects, error) {
	own, err := r.ownsNamespace(ctx, fc)
	if err != nil {
		return nil, err
	}
	objs, err := render.Build(fc, render.Options{DefaultImage: r.DefaultImage, DefaultCollectorImage: r.DefaultCollectorImage, OwnNamespace: own})
	if err != nil {
		return nil, err
	}
	type step struct {
		what string
		obj  runtime.ApplyConfiguration
		skip bool
	}
	steps := []step{
		{"namespace", objs.Namespace, objs.Namespace == nil},
		{"service account", objs.ServiceAccount, false},
		{"role", objs.Role, false},
		{"role binding", objs.RoleBinding, false},
		{"config map", objs.ConfigMap, false},
		{"metrics web configuration config map", objs.MetricsWebConfig, false},
		{"metrics service", objs.Service, false},
		{"daemon set", objs.DaemonSet, false},
		{"agent export cluster role", objs.AgentExportRole, false},
		{"agent export cluster role binding", objs.AgentExportBinding, false},
	}
	if c := objs.Collector; c != nil {
		steps = append(steps, []step{
			{"kafka collector service account", c.ServiceAccount, false},
			{"kafka collector cluster role", c.ClusterRole, false},
			{"kafka collector cluster role binding", c.ClusterRoleBinding, false},
			{"kafka collector metrics service", c.Service, false},
			{"kafka collector config map", c.ConfigMap, false},
			{"kafka collector deployment", c.Deployment, false},
		}...)
	}
	for i, s := range steps {
		if !s.skip {
			if err := r.Client.Apply(ctx, s.obj, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
				return nil, fmt.Errorf("applying the %s: %w", s.what, err)
			}
		}
		if i == 0 {
			// The certificates and the CA bundle, which the pods mount,
			// once their namespace exists.
			if objs.CertsDue, err = r.ensureSecurity(ctx, fc); err != nil {
				return nil, err
			}
		}
	}
	if objs.Collector == nil {
		if err := r.deleteCollector(ctx, fc.Spec.Namespace); err != nil {
			return nil, err
		}
	}
	wanted := map[client.ObjectKey]bool{}
	for _, cm := range objs.Dashboards {
		key := client.ObjectKey{Namespace: *cm.Namespace, Name: *cm.Name}
		if err := r.Client.Apply(ctx, cm, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return nil, fmt.Errorf("applying the dashboard config map %s: %w", key, err)
		}
		wanted[key] = true
	}
	if err := r.pruneDashboards(ctx, wanted); err != nil {
		return nil, err
	}
	return objs, nil
}

// pruneDashboards deletes the dashboard ConfigMaps the operator applied
// (labelled as managed by it, component dashboards), in any namespace, that
// are not wanted: all of them when the dashboards are disabled, those of the
// previous namespace when spec.dashboards.namespace changed. Owner
// references alone would leave them until the FlowCollector is deleted.
func (r *FlowCollectorReconciler) pruneDashboards(ctx context.Context, wanted map[client.ObjectKey]bool) error {
	var list corev1.ConfigMapList
	if err := r.Client.List(ctx, &list, client.MatchingLabels{
		render.LabelManagedBy: render.ManagedByValue,
		render.LabelComponent: render.DashboardsComponent,
	}); err != nil {
		return fmt.Errorf("listing the dashboard config maps: %w", err)
	}
	for i := range list.Items {
		cm := &list.Items[i]
		key := client.ObjectKeyFromObject(cm)
		if wanted[key] || !cm.DeletionTimestamp.IsZero() {
			continue
		}
		switch err := r.Client.Delete(ctx, cm); {
		case apierrors.IsNotFound(err): // already gone; the cache was behind
		case err != nil:
			return fmt.Errorf("deleting the dashboard config map %s: %w", key, err)
		default:
			log.FromContext(ctx).Info("deleted a dashboard config map no longer wanted", "configMap", key)
		}
	}
	return nil
}

// deleteCollector deletes the Kafka collector's objects, which the operator
// applied for a kafka exporter that is gone. Owner references alone would
// leave them until the FlowCollector is deleted. Each is looked up in the
// cache first, so that a FlowCollector without Kafka costs no API call.
func (r *FlowCollectorReconciler) deleteCollector(ctx context.Context, ns string) error {
	for _, obj := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.CollectorName}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.CollectorName}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.CollectorName}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.CollectorName}},
	} {
		key := client.ObjectKeyFromObject(obj)
		switch err := r.Client.Get(ctx, key, obj); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("reading the kafka collector's %T %s: %w", obj, key, err)
		}
		if obj.GetLabels()[render.LabelComponent] != render.CollectorComponent || !obj.GetDeletionTimestamp().IsZero() {
			continue
		}
		switch err := r.Client.Delete(ctx, obj); {
		case apierrors.IsNotFound(err): // already gone; the cache was behind
		case err != nil:
			return fmt.Errorf("deleting the kafka collector's %T %s: %w", obj, key, err)
		default:
			log.FromContext(ctx).Info("deleted a kafka collector object no longer wanted", "kind", fmt.Sprintf("%T", obj), "name", key)
		}
	}
	return nil
}

// ownsNamespace reports whether the operator manages the agent namespace:
// true when it does not exist yet (the operator creates it) or when this
// FlowCollector controls it. A namespace created by someone else is used as
// it is and never gets an owner reference, so deleting the FlowCollector
// cannot delete it.
func (r *FlowCollectorReconciler) ownsNamespace(ctx context.Context, fc *v1alpha1.FlowCollector) (bool, error) {
	ns := &corev1.Namespace{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: fc.Spec.Namespace}, ns)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading namespace %s: %w", fc.Spec.Namespace, err)
	}
	return metav1.IsControlledBy(ns, fc), nil
}

// updateStatus writes the status computed from the outcome, the agent
// DaemonSet (nil if absent) and the Kafka collectors (nil without them), if
// it changed.
func (r *FlowCollectorReconciler) updateStatus(ctx context.Context, fc *v1alpha1.FlowCollector, ns string, ds *appsv1.DaemonSet, cs *collectorState, o outcome) error {
	orig := fc.DeepCopy()
	s := &fc.Status
	s.ObservedGeneration = fc.Generation
	s.Namespace = ns
	s.DesiredAgents, s.ReadyAgents, s.UpdatedAgents = 0, 0, 0
	if ds != nil {
		s.DesiredAgents = ds.Status.DesiredNumberScheduled
		s.ReadyAgents = ds.Status.NumberReady
		s.UpdatedAgents = ds.Status.UpdatedNumberScheduled
	}
	ready, degraded := conditions(ds, o)
	ready.ObservedGeneration, degraded.ObservedGeneration = fc.Generation, fc.Generation
	meta.SetStatusCondition(&s.Conditions, ready)
	meta.SetStatusCondition(&s.Conditions, degraded)
	setCollectorStatus(s, cs, o, ns, fc.Generation)

	if equalStatus(&orig.Status, s) {
		return nil
	}
	patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, fc, patch); err != nil {
		return fmt.Errorf("updating the FlowCollector status: %w", err)
	}
	return nil
}

// conditions computes Ready and Degraded.
func conditions(ds *appsv1.DaemonSet, o outcome) (ready, degraded metav1.Condition) {
	ready = metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse}
	degraded = metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonAsExpected, Message: "every object is applied"}

	switch {
	case o.invalid != nil:
		degraded.Status, degraded.Reason = metav1.ConditionTrue, v1alpha1.ReasonInvalidSpec
		degraded.Message = "invalid spec, the running agents and collectors are left as they are: " + o.invalid.Error()
		ready.Reason, ready.Message = o.notApplied()
		return ready, degraded
	case o.applyErr != nil:
		degraded.Status, degraded.Reason = metav1.ConditionTrue, v1alpha1.ReasonApplyFailed
		degraded.Message = o.applyErr.Error()
		ready.Reason, ready.Message = o.notApplied()
		return ready, degraded
	}

	ready.Status, ready.Reason, ready.Message = daemonSetReadiness(ds, o.hash)
	if ds != nil {
		o.agentFailures.explain(&ready, agents, ds.Namespace)
	}
	return ready, degraded
}

// daemonSetReadiness says whether every scheduled agent runs the pod template
// with config hash hash and is ready.
func daemonSetReadiness(ds *appsv1.DaemonSet, hash string) (metav1.ConditionStatus, string, string) {
	if ds == nil {
		return metav1.ConditionFalse, v1alpha1.ReasonRollingOut, "waiting for the agent DaemonSet to be created"
	}
	st := ds.Status
	switch {
	case ds.Spec.Template.Annotations[render.ConfigHashAnnotation] != hash ||
		st.ObservedGeneration < ds.Generation:
		return metav1.ConditionFalse, v1alpha1.ReasonRollingOut, "waiting for the DaemonSet controller to see the new agent configuration"
	case st.DesiredNumberScheduled == 0:
		return metav1.ConditionFalse, v1alpha1.ReasonNoNodes, "no node matches the agent's node selector and tolerations"
	case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		return metav1.ConditionFalse, v1alpha1.ReasonRollingOut,
			fmt.Sprintf("%d of %d agents run the current configuration", st.UpdatedNumberScheduled, st.DesiredNumberScheduled)
	case st.NumberReady < st.DesiredNumberScheduled || st.NumberUnavailable > 0:
		return metav1.ConditionFalse, v1alpha1.ReasonAgentsNotReady,
			fmt.Sprintf("%d of %d agents are ready", st.NumberReady, st.DesiredNumberScheduled)
	}
	return metav1.ConditionTrue, v1alpha1.ReasonAgentsReady,
		fmt.Sprintf("%d of %d agents are ready", st.NumberReady, st.DesiredNumberScheduled)
}

// equalStatus compares two statuses, ignoring nothing: SetStatusCondition
// keeps LastTransitionTime when a condition's status is unchanged, so an
// unchanged status compares equal.
func equalStatus(a, b *v1alpha1.FlowCollectorStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || a.Namespace != b.Namespace ||
		a.DesiredAgents != b.DesiredAgents || a.ReadyAgents != b.ReadyAgents || a.UpdatedAgents != b.UpdatedAgents ||
		a.DesiredCollectors != b.DesiredCollectors || a.ReadyCollectors != b.ReadyCollectors || a.UpdatedCollectors != b.UpdatedCollectors ||
		len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message ||
			x.ObservedGeneration != y.ObservedGeneration || !x.LastTransitionTime.Equal(&y.LastTransitionTime) {
			return false
		}
	}
	return true
}

// SetupWithManager registers the reconciler. It watches the FlowCollector
// (spec changes only: its own status updates must not loop) and every object
// it owns, so that drift or a DaemonSet status change triggers a reconcile.
func (r *FlowCollectorReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.APIReader == nil {
		return errors.New("FlowCollectorReconciler needs Client and APIReader")
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("flowcollector").
		For(&v1alpha1.FlowCollector{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&corev1.Namespace{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&appsv1.Deployment{}).
		Owns(&rbacv1.ClusterRole{}).
		Owns(&rbacv1.ClusterRoleBinding{}).
		Watches(failedMountEvents()).
		Watches(podChanges()).
		Complete(r)
}

// CacheByObject restricts the manager's cache for the kinds the operator
// owns to the objects it labelled, so that it does not hold every ConfigMap
// or Service of the cluster in memory, its Events to the kubelet's
// FailedMount events of pods, and its Pods to the agents' and the Kafka
// collectors'.
func CacheByObject() map[client.Object]cache.ByObject {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.ManagedByValue})}
	return map[client.Object]cache.ByObject{
		&corev1.Namespace{}:          managed,
		&corev1.ServiceAccount{}:     managed,
		&rbacv1.Role{}:               managed,
		&rbacv1.RoleBinding{}:        managed,
		&corev1.ConfigMap{}:          managed,
		&corev1.Service{}:            managed,
		&appsv1.DaemonSet{}:          managed,
		&appsv1.Deployment{}:         managed,
		&rbacv1.ClusterRole{}:        managed,
		&rbacv1.ClusterRoleBinding{}: managed,
		&corev1.Event{}:              failedMountCache(),
		&corev1.Pod{}:                podCache(),
	}
}

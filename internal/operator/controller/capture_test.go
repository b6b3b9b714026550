package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/internal/shared/kubeauth"
)

// TestCaptureSpec: spec.agent.capture gets its defaults from the schema
// (enable true, maxSnaplen 128), the schema refuses a snaplen outside the
// agent's 1 to 65000 with the API server's message, and a change reaches
// the agents' configuration (capture: false, capture_max_snaplen: 1500)
// and rolls them (the pod template's hash is the new configuration's).
func TestCaptureSpec(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		snaplen int32
		want    string
	}{
		{-1, "spec.agent.capture.maxSnaplen: Invalid value: -1: spec.agent.capture.maxSnaplen in body should be greater than or equal to 1"},
		// The schema's maximum is the agent's (a copy fits one perf sample).
		{config.MaxCaptureSnaplen + 1, "spec.agent.capture.maxSnaplen: Invalid value: 65001: spec.agent.capture.maxSnaplen in body should be less than or equal to 65000"},
	} {
		fc := newCollector("fl-never")
		fc.Spec.Agent.Capture.MaxSnaplen = tc.snaplen
		err := k8s.Create(ctx, fc)
		if err == nil {
			_ = k8s.Delete(ctx, fc)
			t.Fatalf("maxSnaplen %d: created; want the schema to reject it with %q", tc.snaplen, tc.want)
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("maxSnaplen %d: error %q, want an Invalid error containing %q", tc.snaplen, err, tc.want)
		}
	}

	const ns = "fl-capture"
	create(t, newCollector(ns))
	if c := get(t).Spec.Agent.Capture; c.Enable == nil || !*c.Enable || c.MaxSnaplen != 128 {
		t.Errorf("spec.agent.capture after the schema's defaults: %+v, want enable true, maxSnaplen 128", c)
	}
	ds := waitFor(t, agentDaemonSet(ns), exists)
	oldHash := hashOf(ds)
	cm := waitFor(t, configMap(ns), exists)
	if cfg := cm.Data[render.ConfigKey]; strings.Contains(cfg, "capture") {
		t.Errorf("the default configuration has capture keys (the agent's defaults are the spec's):\n%s", cfg)
	}

	off := false
	if err := update(t, func(fc *v1alpha1.FlowCollector) {
		fc.Spec.Agent.Capture = v1alpha1.AgentCapture{Enable: &off, MaxSnaplen: 1500}
	}); err != nil {
		t.Fatal(err)
	}
	cm = waitFor(t, configMap(ns), func(cm *corev1.ConfigMap) error {
		if !strings.Contains(cm.Data[render.ConfigKey], "\ncapture: false\ncapture_max_snaplen: 1500\n") {
			return errors.New("ConfigMap not updated yet:\n" + cm.Data[render.ConfigKey])
		}
		return nil
	})
	ds = waitFor(t, agentDaemonSet(ns), func(ds *appsv1.DaemonSet) error {
		if hashOf(ds) == oldHash {
			return errors.New("pod template hash unchanged")
		}
		return nil
	})
	if got, want := hashOf(ds), render.Hash([]byte(cm.Data[render.ConfigKey])); got != want {
		t.Errorf("hash %s, want %s (the new configuration's)", got, want)
	}
}

// TestCaptureRole: the ClusterRole flowlens-capture of
// manifests/flowlens-operator.yaml (the chart's is the same object:
// test/install), bound as its comment says, lets a user capture (create
// flowcollectors/capture of the FlowCollector cluster) and nothing else:
// not read flows, not capture under another name; flowlens-flows-reader
// does not let one capture; unbound, nobody may. The API server's own
// authorizer answers (SubjectAccessReview), as it does the collector.
func TestCaptureRole(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	// Apply the two unbound ClusterRoles of the manifest, as kubectl would.
	var role *rbacv1.ClusterRole
	for _, u := range readManifest(t, "flowlens-operator.yaml") {
		switch u.GetKind() {
		case "ClusterRole":
			if u.GetName() != kubeauth.CaptureClusterRole && u.GetName() != kubeauth.ReaderClusterRole {
				continue
			}
			if err := k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
				t.Fatal(err)
			}
			if u.GetName() == kubeauth.CaptureClusterRole {
				role = &rbacv1.ClusterRole{}
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), role); err != nil {
					t.Fatal(err)
				}
			}
		case "ClusterRoleBinding", "RoleBinding":
			if ref, _, _ := unstructured.NestedString(u.Object, "roleRef", "name"); ref == kubeauth.CaptureClusterRole {
				t.Errorf("manifests/flowlens-operator.yaml binds %s (%s %s): it must ship unbound", ref, u.GetKind(), u.GetName())
			}
		}
	}
	if role == nil {
		t.Fatalf("manifests/flowlens-operator.yaml has no ClusterRole %s", kubeauth.CaptureClusterRole)
	}
	for _, k := range []string{"view", "edit", "admin"} {
		if v := role.Labels["rbac.authorization.k8s.io/aggregate-to-"+k]; v != "" || role.AggregationRule != nil {
			t.Errorf("%s is aggregated into %s (labels %v): it would grant capture", role.Name, k, role.Labels)
		}
	}
	for _, b := range []struct{ user, role string }{{"capture-alice", kubeauth.CaptureClusterRole}, {"capture-bob", kubeauth.ReaderClusterRole}} {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: b.user}}}
		if err := k8s.Create(ctx, crb); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), crb) })
	}

	allowed := func(user, subresource, name, verb string) (bool, error) {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authzv1.ResourceAttributes{Group: kubeauth.Group, Resource: kubeauth.Resource,
				Subresource: subresource, Name: name, Verb: verb}}}
		if err := k8s.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed && !sar.Status.Denied, nil
	}
	for _, tc := range []struct {
		user, subresource, name, verb string
		want                          bool
	}{
		{"capture-alice", kubeauth.SubresourceCapture, kubeauth.Name, kubeauth.VerbCapture, true},
		{"capture-alice", kubeauth.Subresource, kubeauth.Name, kubeauth.VerbRead, false},     // capture is not reading flows
		{"capture-alice", kubeauth.Subresource, kubeauth.Name, kubeauth.VerbExport, false},   // nor exporting them
		{"capture-alice", kubeauth.SubresourceCapture, "other", kubeauth.VerbCapture, false}, // the singleton only
		{"capture-alice", kubeauth.SubresourceCapture, kubeauth.Name, "get", false},
		{"capture-bob", kubeauth.Subresource, kubeauth.Name, kubeauth.VerbRead, true},
		{"capture-bob", kubeauth.SubresourceCapture, kubeauth.Name, kubeauth.VerbCapture, false}, // reading flows is not capturing
		{"capture-carol", kubeauth.SubresourceCapture, kubeauth.Name, kubeauth.VerbCapture, false},
	} {
		// RBAC's cache of bindings settles within moments: poll.
		eventually(t, wait, func() error {
			got, err := allowed(tc.user, tc.subresource, tc.name, tc.verb)
			if err != nil {
				return err
			}
			if got != tc.want {
				return fmt.Errorf("%s may %s flowcollectors/%s %s: %v, want %v", tc.user, tc.verb, tc.subresource, tc.name, got, tc.want)
			}
			return nil
		})
	}
}

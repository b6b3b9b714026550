package install

import (
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flowlens/flowlens/internal/shared/kubeauth"
)

// TestChartCaptureRole: the chart ships the ClusterRole flowlens-capture
// (issue #32) with exactly create on flowcollectors/capture of the
// FlowCollector cluster, whatever the values (it is the operator's, not
// the collector's), unbound and not aggregated; and it takes no agent
// values: capture is configured in the FlowCollector
// (spec.agent.capture), like every agent setting, so --set agent.* is
// refused rather than ignored.
func TestChartCaptureRole(t *testing.T) {
	want := []rbacv1.PolicyRule{{APIGroups: []string{kubeauth.Group}, Resources: []string{kubeauth.Resource + "/" + kubeauth.SubresourceCapture},
		ResourceNames: []string{kubeauth.Name}, Verbs: []string{kubeauth.VerbCapture}}}
	for _, set := range [][]string{nil, {"collector.enabled=false"}} {
		var role *rbacv1.ClusterRole
		for _, u := range helmTemplate(t, set...) {
			switch u.GetKind() {
			case "ClusterRole":
				if u.GetName() == kubeauth.CaptureClusterRole {
					role = &rbacv1.ClusterRole{}
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, role); err != nil {
						t.Fatal(err)
					}
				}
			case "ClusterRoleBinding", "RoleBinding":
				var b rbacv1.RoleBinding
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b); err != nil {
					t.Fatal(err)
				}
				if b.RoleRef.Name == kubeauth.CaptureClusterRole {
					t.Errorf("%v: %s %s binds %s: it must ship unbound", set, u.GetKind(), u.GetName(), b.RoleRef.Name)
				}
			}
		}
		if role == nil {
			t.Errorf("%v: no ClusterRole %s", set, kubeauth.CaptureClusterRole)
			continue
		}
		if !reflect.DeepEqual(role.Rules, want) {
			t.Errorf("%v: %s rules %+v, want %+v", set, role.Name, role.Rules, want)
		}
		for k := range role.Labels {
			if strings.HasPrefix(k, "rbac.authorization.k8s.io/aggregate-to-") {
				t.Errorf("%v: %s has label %s: it would be aggregated into a built-in role", set, role.Name, k)
			}
		}
	}
	_, stderr, err := runHelm(t, "template", "flowlens", chart, "--set", "agent.capture.enable=false")
	if err == nil || !strings.Contains(string(stderr), "'agent' not allowed") {
		t.Errorf("--set agent.capture.enable=false: %v, want the schema to refuse 'agent'; stderr:\n%s", err, stderr)
	}
}

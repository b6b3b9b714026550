package install

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flowlens/flowlens/internal/operator/dashboards"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// operatorRights is the allow-list of the operator's RBAC (issue #27,
// least privilege), one line per right: "scope group/resource verb
// [names]". scope is "cluster" (the ClusterRole flowlens-operator) or the
// namespace of a Role flowlens-operator. A right the markers add, or a
// name they drop, fails TestOperatorRBACAllowList: change this list only
// with a reason (docs/security.md, Operator RBAC).
var operatorRights = []string{
	// The FlowCollector and its status.
	"cluster flowlens.io/flowcollectors get", "cluster flowlens.io/flowcollectors list", "cluster flowlens.io/flowcollectors watch",
	"cluster flowlens.io/flowcollectors/status get", "cluster flowlens.io/flowcollectors/status patch", "cluster flowlens.io/flowcollectors/status update",
	"cluster flowlens.io/flowcollectors/finalizers update",
	// Read (the cache, filtered by the operator's label).
	"cluster /configmaps get", "cluster /configmaps list", "cluster /configmaps watch",
	"cluster /namespaces get", "cluster /namespaces list", "cluster /namespaces watch",
	"cluster /serviceaccounts get", "cluster /serviceaccounts list", "cluster /serviceaccounts watch",
	"cluster /services get", "cluster /services list", "cluster /services watch",
	"cluster /events get", "cluster /events list", "cluster /events watch",
	"cluster /nodes get", "cluster /nodes list", "cluster /nodes watch",
	"cluster /pods get", "cluster /pods list", "cluster /pods watch",
	"cluster apps/daemonsets get", "cluster apps/daemonsets list", "cluster apps/daemonsets watch",
	"cluster apps/deployments get", "cluster apps/deployments list", "cluster apps/deployments watch",
	"cluster apps/replicasets get", "cluster apps/replicasets list", "cluster apps/replicasets watch",
	// The collector it runs names Job pods by their CronJob (k8smeta), and
	// RBAC lets it grant only what it holds.
	"cluster batch/jobs get", "cluster batch/jobs list", "cluster batch/jobs watch",
	"cluster rbac.authorization.k8s.io/roles get", "cluster rbac.authorization.k8s.io/roles list", "cluster rbac.authorization.k8s.io/roles watch",
	"cluster rbac.authorization.k8s.io/rolebindings get", "cluster rbac.authorization.k8s.io/rolebindings list", "cluster rbac.authorization.k8s.io/rolebindings watch",
	"cluster rbac.authorization.k8s.io/clusterroles get", "cluster rbac.authorization.k8s.io/clusterroles list", "cluster rbac.authorization.k8s.io/clusterroles watch",
	"cluster rbac.authorization.k8s.io/clusterrolebindings get", "cluster rbac.authorization.k8s.io/clusterrolebindings list", "cluster rbac.authorization.k8s.io/clusterrolebindings watch",
	// Cluster-wide writes: create (no name is known then), the rest by name.
	"cluster /namespaces create", "cluster /namespaces patch [flowlens]",
	"cluster /configmaps create",
	"cluster /configmaps patch [flowlens-dashboard-agent-health flowlens-dashboard-drops-latency flowlens-dashboard-service-map flowlens-dashboard-traffic]",
	"cluster /configmaps delete [flowlens-dashboard-agent-health flowlens-dashboard-drops-latency flowlens-dashboard-service-map flowlens-dashboard-traffic]",
	"cluster rbac.authorization.k8s.io/clusterroles create", "cluster rbac.authorization.k8s.io/clusterrolebindings create",
	"cluster rbac.authorization.k8s.io/clusterroles patch [flowlens-agent-export flowlens-collector-kafka]",
	"cluster rbac.authorization.k8s.io/clusterroles delete [flowlens-agent-export flowlens-collector-kafka]",
	"cluster rbac.authorization.k8s.io/clusterrolebindings patch [flowlens-agent-export flowlens-collector-kafka]",
	"cluster rbac.authorization.k8s.io/clusterrolebindings delete [flowlens-agent-export flowlens-collector-kafka]",
	// Rights it grants (RBAC lets it grant only what it holds).
	"cluster flowlens.io/flowcollectors/flows create [cluster]",
	"cluster authentication.k8s.io/tokenreviews create", "cluster authorization.k8s.io/subjectaccessreviews create",
	// The agent namespace.
	"flowlens /configmaps create", "flowlens /configmaps patch", "flowlens /configmaps delete",
	"flowlens /serviceaccounts create", "flowlens /serviceaccounts patch", "flowlens /serviceaccounts delete",
	"flowlens /services create", "flowlens /services patch", "flowlens /services delete",
	"flowlens /secrets get", "flowlens /secrets create", "flowlens /secrets patch",
	"flowlens apps/daemonsets create", "flowlens apps/daemonsets patch",
	"flowlens apps/deployments create", "flowlens apps/deployments patch", "flowlens apps/deployments delete",
	"flowlens rbac.authorization.k8s.io/roles create", "flowlens rbac.authorization.k8s.io/roles patch",
	"flowlens rbac.authorization.k8s.io/rolebindings create", "flowlens rbac.authorization.k8s.io/rolebindings patch",
	"flowlens networking.k8s.io/networkpolicies get", "flowlens networking.k8s.io/networkpolicies create",
	"flowlens networking.k8s.io/networkpolicies patch", "flowlens networking.k8s.io/networkpolicies delete",
	"flowlens cert-manager.io/certificates get", "flowlens cert-manager.io/certificates create", "flowlens cert-manager.io/certificates patch",
	// Leader election, in the operator's namespace (config/rbac/leader_election_role.yaml).
	"flowlens-system coordination.k8s.io/leases get", "flowlens-system coordination.k8s.io/leases list", "flowlens-system coordination.k8s.io/leases watch",
	"flowlens-system coordination.k8s.io/leases create", "flowlens-system coordination.k8s.io/leases update", "flowlens-system coordination.k8s.io/leases patch",
	"flowlens-system /events create", "flowlens-system /events patch",
	"flowlens-system events.k8s.io/events create", "flowlens-system events.k8s.io/events patch",
}

// rights expands the rules of the operator's ClusterRole and Roles, bound to
// its ServiceAccount, among objs.
func rights(t *testing.T, objs []*unstructuredObj) []string {
	t.Helper()
	var out []string
	for _, o := range objs {
		scope := "cluster"
		if o.kind == "Role" {
			scope = o.namespace
		}
		for _, r := range o.rules {
			names := ""
			if len(r.ResourceNames) > 0 {
				n := slices.Clone(r.ResourceNames)
				slices.Sort(n)
				names = " [" + strings.Join(n, " ") + "]"
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out = append(out, scope+" "+g+"/"+res+" "+v+names)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

type unstructuredObj struct {
	kind, namespace string
	rules           []rbacv1.PolicyRule
}

// operatorRoles returns the roles bound to the ServiceAccount
// flowlens-operator in the objects of a manifest or of helm template.
func operatorRoles(t *testing.T, what string, objs []map[string]any) []*unstructuredObj {
	t.Helper()
	bound := map[string]bool{} // kind/namespace/name of the roles bound to the operator
	for _, o := range objs {
		kind, _ := o["kind"].(string)
		if kind != "RoleBinding" && kind != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o, &b); err != nil {
			t.Fatal(err)
		}
		for _, s := range b.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == "flowlens-operator" {
				ns := ""
				if b.RoleRef.Kind == "Role" {
					ns = b.Namespace
				}
				bound[b.RoleRef.Kind+"/"+ns+"/"+b.RoleRef.Name] = true
			}
		}
	}
	var out []*unstructuredObj
	for _, o := range objs {
		kind, _ := o["kind"].(string)
		if kind != "Role" && kind != "ClusterRole" {
			continue
		}
		var r rbacv1.Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o, &r); err != nil {
			t.Fatal(err)
		}
		if bound[kind+"/"+r.Namespace+"/"+r.Name] {
			out = append(out, &unstructuredObj{kind: kind, namespace: r.Namespace, rules: r.Rules})
		}
	}
	if len(out) != 3 {
		t.Errorf("%s: %d roles bound to the operator, want its ClusterRole and its Roles in flowlens and flowlens-system", what, len(out))
	}
	return out
}

// TestOperatorRBACAllowList: the rights the operator's ServiceAccount gets
// from manifests/flowlens-operator.yaml and from the chart's default values
// are exactly operatorRights; every cluster-wide write but create names its
// objects; the dashboard ConfigMaps' names are the ones the operator
// renders.
func TestOperatorRBACAllowList(t *testing.T) {
	want := slices.Clone(operatorRights)
	slices.Sort(want)
	for _, src := range []struct {
		what string
		objs func() []map[string]any
	}{
		{"manifests/flowlens-operator.yaml", func() []map[string]any {
			var out []map[string]any
			for _, u := range manifest(t, "flowlens-operator.yaml") {
				out = append(out, u.Object)
			}
			return out
		}},
		{"the chart", func() []map[string]any {
			var out []map[string]any
			for _, u := range helmTemplate(t) {
				out = append(out, u.Object)
			}
			return out
		}},
	} {
		got := rights(t, operatorRoles(t, src.what, src.objs()))
		for _, g := range got {
			if !slices.Contains(want, g) {
				t.Errorf("%s grants the operator %q, which is not in the allow-list", src.what, g)
			}
			f := strings.Fields(g)
			if f[0] == "cluster" && !slices.Contains([]string{"get", "list", "watch", "create"}, f[2]) && len(f) < 4 &&
				!strings.HasPrefix(f[1], "flowlens.io/") {
				t.Errorf("%s: cluster-wide %s on %s without resourceNames", src.what, f[2], f[1])
			}
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("%s lacks the allow-list's %q", src.what, w)
			}
		}
	}

	cms, err := dashboards.ConfigMaps("monitoring")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range cms {
		names = append(names, cm.Name)
	}
	slices.Sort(names)
	if w := "cluster /configmaps delete [" + strings.Join(names, " ") + "]"; !slices.Contains(operatorRights, w) {
		t.Errorf("the dashboard ConfigMaps are %v: the operator's delete and patch must name exactly them", names)
	}
	for _, n := range []string{render.ExportRoleName, render.CollectorName} {
		if w := "cluster rbac.authorization.k8s.io/clusterroles patch [flowlens-agent-export flowlens-collector-kafka]"; !strings.Contains(w, n) {
			t.Errorf("the ClusterRole %s the operator writes is not named in its rights", n)
		}
	}
}

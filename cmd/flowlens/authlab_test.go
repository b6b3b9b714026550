package main

import (
	"context"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flowlens/flowlens/internal/shared/kubeauth"
)

// authRole is a ClusterRole granting one verb on one subresource of the
// FlowCollector, bound to service account sa of namespace flowlens.
type authRole struct{ role, sub, verb, sa string }

// readerRole is what a user of observe and ui needs: flowlens-flows-reader.
var readerRole = authRole{kubeauth.ReaderClusterRole, kubeauth.Subresource, kubeauth.VerbRead, "reader"}

// authLab writes, on a real API server, the namespace flowlens, a service
// account with a token for each of sas, and the roles with their
// bindings. It returns the tokens by account name.
func authLab(t *testing.T, cs kubernetes.Interface, sas []string, roles ...authRole) map[string]string {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flowlens"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		must(err)
	}
	token := map[string]string{}
	for _, sa := range sas {
		_, err := cs.CoreV1().ServiceAccounts("flowlens").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		must(err)
		tr, err := cs.CoreV1().ServiceAccounts("flowlens").CreateToken(ctx, sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
		must(err)
		token[sa] = tr.Status.Token
	}
	for _, r := range roles {
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.role},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{kubeauth.Group}, Resources: []string{kubeauth.Resource + "/" + r.sub},
				ResourceNames: []string{kubeauth.Name}, Verbs: []string{r.verb}}}}, metav1.CreateOptions{})
		must(err)
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.sa},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: r.sa, Namespace: "flowlens"}}}, metav1.CreateOptions{})
		must(err)
	}
	return token
}

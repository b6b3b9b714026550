package kubeauth_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
)

// clock is a settable Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// Against a real kube-apiserver (envtest): the identity of a pod-bound
// token of audience flowlens-collector (its node), the permission checked
// with RBAC, the answers kept for the TTL only (a revoked binding counts
// once it passed), in a bounded cache.
func TestReviewer(t *testing.T) {
	cfg := envtest.StartT(t, envtest.Options{}).Config
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flowlens"}}, metav1.CreateOptions{}))
	must(cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}))
	must(cs.CoreV1().ServiceAccounts("flowlens").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}))
	pod, err := cs.CoreV1().Pods("flowlens").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-a", Namespace: "flowlens"},
		Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "agent", Containers: []corev1.Container{{Name: "c", Image: "example.com/a:1"}}}},
		metav1.CreateOptions{})
	must(pod, err)
	tr, err := cs.CoreV1().ServiceAccounts("flowlens").CreateToken(ctx, "agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:      []string{kubeauth.Audience},
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	must(tr, err)
	token := tr.Status.Token
	must(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: kubeauth.AgentClusterRole},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{kubeauth.Group}, Resources: []string{"flowcollectors/flows"},
			ResourceNames: []string{kubeauth.Name}, Verbs: []string{kubeauth.VerbExport}}}}, metav1.CreateOptions{}))
	must(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: kubeauth.AgentClusterRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "agent", Namespace: "flowlens"}}}, metav1.CreateOptions{}))

	clk := &clock{now: time.Now()}
	r := kubeauth.New(cs, kubeauth.Options{TTL: time.Minute, MaxEntries: 3, Now: clk.Now})
	id, err := r.Authorize(ctx, token, kubeauth.Audience, kubeauth.VerbExport)
	if err != nil {
		t.Fatal(err)
	}
	if id.User != "system:serviceaccount:flowlens:agent" || id.Node != "node-a" {
		t.Errorf("identity %+v, want the agent SA on node-a", id)
	}
	var forbidden *kubeauth.ForbiddenError
	if _, err := r.Authorize(ctx, token, kubeauth.Audience, kubeauth.VerbRead); !errors.As(err, &forbidden) ||
		err.Error() != `forbidden: User "system:serviceaccount:flowlens:agent" cannot get flowcollectors/flows in API group flowlens.io (resourceName "cluster"); an administrator can bind the ClusterRole flowlens-flows-reader to it` {
		t.Errorf("the agent reading: %v", err)
	}
	if _, err := r.Authorize(ctx, token, "", kubeauth.VerbExport); !errors.Is(err, kubeauth.ErrUnauthenticated) {
		t.Errorf("the agent's token for the API server's audience: %v, want ErrUnauthenticated", err)
	}

	// Revoked: the answer kept for the TTL, then asked again.
	if err := cs.RbacV1().ClusterRoleBindings().Delete(ctx, "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the RBAC authorizer's informer
	if _, err := r.Authorize(ctx, token, kubeauth.Audience, kubeauth.VerbExport); err != nil {
		t.Errorf("within the TTL: %v, want the cached answer", err)
	}
	clk.add(time.Minute)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err = r.Authorize(ctx, token, kubeauth.Audience, kubeauth.VerbExport)
		if errors.As(err, &forbidden) || time.Now().After(deadline) {
			break
		}
		clk.add(time.Minute) // the API server's informer had not seen it yet
		time.Sleep(100 * time.Millisecond)
	}
	if !errors.As(err, &forbidden) || forbidden.Verb != kubeauth.VerbExport {
		t.Errorf("after the TTL: %v, want forbidden", err)
	}
	// Bounded: more callers than MaxEntries keep MaxEntries answers.
	for i := range 5 {
		if _, err := r.Authorize(ctx, token[:len(token)-1-i], kubeauth.Audience, kubeauth.VerbExport); !errors.Is(err, kubeauth.ErrUnauthenticated) {
			t.Errorf("a forged token: %v", err)
		}
	}
	if got := r.Len(); got != 3 {
		t.Errorf("%d cache entries, want MaxEntries 3", got)
	}
}

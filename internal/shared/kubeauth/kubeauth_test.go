package kubeauth_test

import (
	"context"
	"errors"
	"strings"
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

// The API server gone: an answer given before stands past its TTL for
// StaleTTL (counted in Stale), reviewed again at most every TTL; a token
// never reviewed is refused with the review's error; past StaleTTL the
// answer no longer stands. Back, the API server answers again.
func TestReviewerAPIServerGone(t *testing.T) {
	env := envtest.StartT(t, envtest.Options{})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func() string {
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "agent", &authnv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	known, unknown := token(), token()
	clk := &clock{now: time.Now()}
	r := kubeauth.New(cs, kubeauth.Options{TTL: 10 * time.Second, StaleTTL: time.Minute, Now: clk.Now})
	var forbidden *kubeauth.ForbiddenError
	if _, err := r.Authorize(ctx, known, "", kubeauth.VerbExport); !errors.As(err, &forbidden) {
		t.Fatalf("before the outage: %v, want forbidden (no RBAC)", err)
	}
	start := env.StopAPIServer(t)
	clk.add(11 * time.Second)
	if _, err := r.Authorize(ctx, known, "", kubeauth.VerbExport); !errors.As(err, &forbidden) {
		t.Errorf("API server gone, past the TTL: %v, want the last answer", err)
	}
	if _, err := r.Authorize(ctx, unknown, "", kubeauth.VerbExport); err == nil || errors.As(err, &forbidden) ||
		!strings.HasPrefix(err.Error(), "TokenReview: ") {
		t.Errorf("a token never reviewed, API server gone: %v, want the review's error", err)
	}
	clk.add(5 * time.Second) // within the TTL the stale answer was renewed for: not asked
	if _, err := r.Authorize(ctx, known, "", kubeauth.VerbExport); !errors.As(err, &forbidden) {
		t.Errorf("API server gone, renewed: %v, want the last answer", err)
	}
	if n := r.Stale.Load(); n != 1 {
		t.Errorf("Stale %d, want 1", n)
	}
	clk.add(time.Minute) // past TTL + StaleTTL of the last real answer
	if _, err := r.Authorize(ctx, known, "", kubeauth.VerbExport); err == nil || errors.As(err, &forbidden) {
		t.Errorf("past StaleTTL: %v, want the review's error", err)
	}
	start()
	if _, err := r.Authorize(ctx, unknown, "", kubeauth.VerbExport); !errors.As(err, &forbidden) {
		t.Errorf("API server back: %v, want its answer", err)
	}
}

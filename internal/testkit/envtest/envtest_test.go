package envtest_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"

	"github.com/flowlens/flowlens/internal/testkit/envtest"
)

func TestAssetsSaysWhereItLooked(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	_, err := envtest.Assets()
	if err == nil || !strings.Contains(err.Error(), "no kube-apiserver in ") || !strings.Contains(err.Error(), "make envtest-assets") {
		t.Fatalf("empty KUBEBUILDER_ASSETS: %v", err)
	}
}

// The apiserver runs, with the CRD asked for installed.
func TestStartInstallsCRDs(t *testing.T) {
	env := envtest.StartT(t, envtest.Options{CRDs: []string{"config/crd/bases"}})
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	rl, err := dc.ServerResourcesForGroupVersion("flowlens.io/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rl.APIResources {
		if r.Name == "flowcollectors" {
			return
		}
	}
	t.Fatalf("no flowcollectors in %+v", rl.APIResources)
}

// The apiserver stopped refuses connections, a second one on the same
// etcd takes writes meanwhile; started again, the first serves the
// objects etcd kept and those written meanwhile, to the same Config.
func TestStopAPIServer(t *testing.T) {
	env := envtest.StartT(t, envtest.Options{})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	other, err := kubernetes.NewForConfig(env.AnotherAPIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := func(cs *kubernetes.Clientset, name string) {
		t.Helper()
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ns(cs, "kept")
	start := env.StopAPIServer(t)
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "kept", metav1.GetOptions{}); err == nil {
		t.Fatal("apiserver stopped, and still answering")
	}
	ns(other, "meanwhile")
	start()
	for _, name := range []string{"kept", "meanwhile"} {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("after the restart: %v", err)
		}
	}
}

package envtest_test

import (
	"strings"
	"testing"

	"k8s.io/client-go/discovery"

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

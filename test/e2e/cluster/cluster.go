// Package cluster is what the end-to-end tests share: a control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, and
// optionally kwok's controller) started by kwokctl from the cached local
// builds of `make e2e-assets`, a client for it, applying files of
// manifests/ as a user would, and polling for a condition.
//
// The kwok e2e (package e2e) fakes its nodes with kwok; the kubelet e2e
// (package kubelet) disables kwok's controller and registers a real kubelet.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/testkit"
)

// Bins are the directories of the cached binaries, from the environment
// `make e2e` and `make e2e-kubelet` set.
type Bins struct {
	K8s  string // FLOWLENS_E2E_K8S_BIN: kube-apiserver, etcd, ... (and kubelet, kube-proxy)
	Kwok string // FLOWLENS_E2E_KWOK_BIN: kwok, kwokctl
}

// NeedBins skips or fails t (testkit.Need) unless every named binary of
// K8s (and kwok, kwokctl) exists, and returns the directories. target is
// the make target that builds them.
func NeedBins(t *testing.T, target string, k8s ...string) Bins {
	t.Helper()
	b := Bins{K8s: os.Getenv("FLOWLENS_E2E_K8S_BIN"), Kwok: os.Getenv("FLOWLENS_E2E_KWOK_BIN")}
	paths := []string{filepath.Join(b.Kwok, "kwok"), filepath.Join(b.Kwok, "kwokctl")}
	for _, n := range append([]string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"}, k8s...) {
		paths = append(paths, filepath.Join(b.K8s, n))
	}
	for _, p := range paths {
		var missing error
		if _, err := os.Stat(p); b.K8s == "" || b.Kwok == "" || err != nil {
			missing = fmt.Errorf("missing (%s): run `make %s`", p, target)
		}
		testkit.Need(t, "e2e binaries (kwok, kube-apiserver, etcd, ...)", missing)
	}
	return b
}

// Start creates a kwokctl cluster called name with the binary runtime and
// returns its admin kubeconfig. kwokctl keeps its state under $HOME/.kwok:
// it gets the private HOME dir, so the test neither reads nor writes the
// user's. args are more `kwokctl create cluster` flags (e.g. --disable
// kwok-controller). The cluster is deleted when the test ends, also when
// it is half created: its components are processes of this machine.
func Start(ctx context.Context, t *testing.T, b Bins, name, dir string, args ...string) (kubeconfig string) {
	t.Helper()
	kubeconfig = filepath.Join(dir, "kubeconfig")
	kwokctl := func(ctx context.Context, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(b.Kwok, "kwokctl"), append(args, "--name", name)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir)
		return cmd.CombinedOutput()
	}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(dir, ".kwok", "clusters", name)); err != nil {
			return // never created
		}
		if out, err := kwokctl(context.Background(), "delete", "cluster"); err != nil {
			t.Errorf("deleting the kwok cluster: %v\n%s", err, out)
		}
	})
	start := time.Now()
	out, err := kwokctl(ctx, append([]string{"create", "cluster", "--runtime", "binary",
		"--kube-apiserver-binary", filepath.Join(b.K8s, "kube-apiserver"),
		"--kube-controller-manager-binary", filepath.Join(b.K8s, "kube-controller-manager"),
		"--kube-scheduler-binary", filepath.Join(b.K8s, "kube-scheduler"),
		"--etcd-binary", filepath.Join(b.K8s, "etcd"),
		"--kwok-controller-binary", filepath.Join(b.Kwok, "kwok"),
		"--kubeconfig", kubeconfig,
		"--wait", "2m"}, args...)...)
	if err != nil {
		t.Fatalf("kwokctl create cluster: %v\n%s", err, out)
	}
	t.Logf("control plane up in %v", time.Since(start).Round(time.Millisecond))
	return kubeconfig
}

// Kwokctl runs another kwokctl command on cluster name (of Start's dir).
func Kwokctl(ctx context.Context, t *testing.T, b Bins, name, dir string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(b.Kwok, "kwokctl"), append(args, "--name", name)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kwokctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Scheme knows the built-in kinds, CRDs and FlowCollector.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// NewClient returns a client for kubeconfig, impersonating as if not
// empty. The API server must be on loopback.
func NewClient(t *testing.T, kubeconfig, as string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg.Host, "https://127.0.0.1:") {
		t.Fatalf("the API server is at %s, not on loopback", cfg.Host)
	}
	cfg.Impersonate.UserName = as
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Apply server-side applies every object of a file of manifests/, as
// `kubectl apply --server-side -f manifests/name` does; edit, if not nil,
// may change each object first.
func Apply(ctx context.Context, t *testing.T, c client.Client, name string, edit func(*unstructured.Unstructured)) {
	t.Helper()
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if edit != nil {
			edit(u)
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
			t.Fatalf("%s: applying %s %s: %v", name, u.GetKind(), u.GetName(), err)
		}
	}
}

// WaitFor polls check every 250 ms until it returns nil, and fails t with
// its last error after timeout or when ctx ends.
func WaitFor(ctx context.Context, t *testing.T, what string, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

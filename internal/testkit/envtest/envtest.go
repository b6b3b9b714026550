// Package envtest boots a real etcd and kube-apiserver for tests, through
// sigs.k8s.io/controller-runtime/pkg/envtest, behind internal/testkit's gate:
// skipped in short mode, skipped outside CI when the binaries are missing,
// failed in CI when they are.
//
// The binaries come from KUBEBUILDER_ASSETS when it is set, else from the
// cache directory `make envtest-assets` (hack/make/operator.mk) builds them
// into: $FLOWLENS_CACHE (default <user cache dir>/flowlens)/envtest/
// k8s-<version>_etcd-<version>, the versions those of the tools modules'
// go.mod files (hack/tools-k8s, hack/envtest).
//
// A suite sharing one apiserver starts it in TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(run(m)) }
//
//	func run(m *testing.M) int {
//		env, skip, err := envtest.Start(envtest.Options{CRDs: []string{"config/crd/bases"}})
//		if err != nil {
//			fmt.Fprintln(os.Stderr, "FAIL:", err)
//			return 1
//		}
//		if skip != "" { // tests call t.Skip(skip) (see Env)
//			return m.Run()
//		}
//		defer env.Stop()
//		cfg = env.Config
//		return m.Run()
//	}
//
// and a single test calls StartT, which stops it at the test's cleanup.
// Env.StopAPIServer takes the apiserver away for a while (etcd and the
// objects stay) and starts it again on the same port and certificates;
// Env.AnotherAPIServer runs a second one on the same etcd, which takes
// writes meanwhile.
package envtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flowlens/flowlens/internal/testkit"
)

// What names the need in skip and failure messages.
const What = "envtest binaries (kube-apiserver, etcd)"

// Options say what to install in the fresh cluster.
type Options struct {
	// CRDs are directories (or files) of CustomResourceDefinitions to
	// install, relative to the module root (e.g. "config/crd/bases");
	// each must exist.
	CRDs []string
}

// Env is a running etcd and kube-apiserver.
type Env struct {
	// Config reaches the apiserver as an administrator.
	Config *rest.Config
	// Assets is the directory the binaries came from.
	Assets string

	env *crenvtest.Environment
}

// Stop stops the apiserver and etcd and removes their data.
func (e *Env) Stop() error { return e.env.Stop() }

// Start boots etcd and kube-apiserver, for a TestMain. It returns skip, why
// the tests skip, when the gate says so (short mode, or the binaries are
// missing outside CI); err when they must fail instead (missing in CI) or
// the start failed; else the running Env.
func Start(opts Options) (env *Env, skip string, err error) {
	assets, missing := Assets()
	if skip, fail := testkit.Gate(What, missing); fail != nil || skip != "" {
		return nil, skip, fail
	}
	root, err := testkit.ModuleRoot()
	if err != nil {
		return nil, "", err
	}
	e := &crenvtest.Environment{BinaryAssetsDirectory: assets, ErrorIfCRDPathMissing: true}
	for _, p := range opts.CRDs {
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, p)
		}
		e.CRDDirectoryPaths = append(e.CRDDirectoryPaths, p)
	}
	cfg, err := e.Start()
	if err != nil {
		// A failed Start can leave etcd and the apiserver running (a CRD
		// that does not install): stop them.
		_ = e.Stop()
		return nil, "", fmt.Errorf("starting envtest from %s: %w", assets, err)
	}
	return &Env{Config: cfg, Assets: assets, env: e}, "", nil
}

// StartT is Start for one test: it skips or fails t as the gate decides, and
// stops the apiserver when t ends.
func StartT(t testing.TB, opts Options) *Env {
	t.Helper()
	env, skip, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	if skip != "" {
		t.Skip(skip)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stopping envtest: %v", err)
		}
	})
	return env
}

// Assets returns the directory holding kube-apiserver and etcd:
// KUBEBUILDER_ASSETS if set, else the cache directory that
// hack/make/operator.mk builds into. The error says where it looked and how
// to get them.
func Assets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		var err error
		if dir, err = cacheDir(); err != nil {
			return "", fmt.Errorf("%v; run `make envtest-assets` or set KUBEBUILDER_ASSETS", err)
		}
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("no %s in %s; run `make envtest-assets` or set KUBEBUILDER_ASSETS", bin, dir)
		}
	}
	return dir, nil
}

// cacheDir is $FLOWLENS_CACHE/envtest/k8s-<version>_etcd-<version>.
func cacheDir() (string, error) {
	root, err := testkit.ModuleRoot()
	if err != nil {
		return "", err
	}
	k8sVersion, err := testkit.ToolVersion(filepath.Join(root, "hack", "tools-k8s", "go.mod"), "k8s.io/kubernetes")
	if err != nil {
		return "", err
	}
	etcdVersion, err := testkit.ToolVersion(filepath.Join(root, "hack", "envtest", "go.mod"), "go.etcd.io/etcd/server/v3")
	if err != nil {
		return "", err
	}
	base, err := testkit.CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "envtest", "k8s-"+k8sVersion+"_etcd-"+etcdVersion), nil
}

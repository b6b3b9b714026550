package controller

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flowlens/flowlens/api/v1alpha1"
)

// The envtest suite: a real etcd and kube-apiserver (built by
// `make envtest-assets`), the CRD from config/crd/bases, and the reconciler
// running in a manager configured like cmd/flowlens-operator's. envtest runs
// no controller-manager, so nothing but the reconciler acts on objects: no
// DaemonSet controller (tests write DaemonSet status themselves) and no
// garbage collector (tests check owner references; make e2e checks the real
// collection).

const testAgentImage = "example.com/flowlens-agent:test"

var (
	scheme  = runtime.NewScheme()
	restCfg *rest.Config
	// k8s talks to the API server directly (no cache), as a user would.
	k8s client.Client
	// envSkip, when not empty, is why the envtest tests skip: the binaries
	// are missing and CI is unset.
	envSkip string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	assets, err := findAssets()
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "FAIL: envtest binaries are required in CI: %v\n", err)
			return 1
		}
		envSkip = fmt.Sprintf("envtest binaries not found (%v); run `make envtest-assets` or set KUBEBUILDER_ASSETS", err)
		fmt.Fprintln(os.Stderr, "skipping the envtest tests:", envSkip)
		return m.Run()
	}

	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapLevel())))
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	restCfg, err = env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting envtest from %s: %v\n", assets, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()

	k8s, err = client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:  scheme,
		Cache:   cache.Options{ByObject: CacheByObject()},
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: creating the manager:", err)
		return 1
	}
	r := &FlowCollectorReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), DefaultImage: testAgentImage}
	if err := r.SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: setting up the reconciler:", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		fmt.Fprintln(os.Stderr, "FAIL: the manager's cache did not sync")
		return 1
	}

	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	return code
}

// needEnv skips the test when the envtest binaries are absent (outside CI).
func needEnv(t *testing.T) {
	t.Helper()
	if envSkip != "" {
		t.Skip(envSkip)
	}
}

func zapLevel() zapcore.Level {
	if os.Getenv("FLOWLENS_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.DPanicLevel // quiet: the tests provoke reconcile errors on purpose
}

// findAssets returns the directory holding kube-apiserver and etcd:
// KUBEBUILDER_ASSETS if set, else the cache directory that
// hack/make/operator.mk builds into, named after the versions pinned in the
// tools modules' go.mod files.
func findAssets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		k8sVersion, err := modVersion("../../hack/tools-k8s/go.mod", "k8s.io/kubernetes")
		if err != nil {
			return "", err
		}
		etcdVersion, err := modVersion("../../hack/envtest/go.mod", "go.etcd.io/etcd/server/v3")
		if err != nil {
			return "", err
		}
		base := os.Getenv("FLOWLENS_CACHE")
		if base == "" {
			cache, err := os.UserCacheDir()
			if err != nil {
				return "", err
			}
			base = filepath.Join(cache, "flowlens")
		}
		dir = filepath.Join(base, "envtest", "k8s-"+k8sVersion+"_etcd-"+etcdVersion)
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("no %s in %s", bin, dir)
		}
	}
	return dir, nil
}

// modVersion returns the version a go.mod file requires of module path.
func modVersion(gomod, path string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == path && strings.HasPrefix(fields[1], "v") {
			return fields[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New(gomod + " does not require " + path)
}

// eventually polls check every 100ms until it returns nil, and fails the
// test with check's last error after timeout.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
)

// The envtest suite: a real etcd and kube-apiserver (built by
// `make envtest-assets`), the CRD from config/crd/bases, and the reconciler
// running in a manager configured like cmd/flowlens-operator's. envtest runs
// no controller-manager, so nothing but the reconciler acts on objects: no
// DaemonSet controller (tests write DaemonSet status themselves) and no
// garbage collector (tests check owner references; make e2e checks the real
// collection).

const (
	testAgentImage     = "example.com/flowlens-agent:test"
	testCollectorImage = "example.com/flowlens-collector:test"
)

var (
	scheme  = runtime.NewScheme()
	restCfg *rest.Config
	// k8s talks to the API server directly (no cache), as a user would.
	k8s client.Client
	// envSkip, when not empty, is why the envtest tests skip (short mode,
	// or the binaries are missing and CI is unset): internal/testkit's gate.
	envSkip string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapLevel())))
	env, skip, err := envtest.Start(envtest.Options{CRDs: []string{filepath.Join("config", "crd", "bases")}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	if skip != "" {
		envSkip = skip
		fmt.Fprintln(os.Stderr, "skipping the envtest tests:", envSkip)
		return m.Run()
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	restCfg = env.Config

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
	r := &FlowCollectorReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), DefaultImage: testAgentImage, DefaultCollectorImage: testCollectorImage}
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

// needEnv skips the test when the suite's apiserver did not start: short
// mode, or the envtest binaries are absent (outside CI).
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

package k8smeta_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flowlens/flowlens/internal/testkit/envtest"
)

// The envtest suite: a real etcd and kube-apiserver (`make envtest-assets`,
// found and gated by internal/testkit/envtest). Nothing but the tests
// acts on objects: no controller-manager, no kubelet, no scheduler, so the
// tests write pod status (podIP, phase) through the status subresource
// themselves and set owner references by hand.

var (
	restCfg *rest.Config
	k8s     kubernetes.Interface
	// envSkip, when not empty, is why the envtest tests skip (short mode,
	// or the binaries are missing and CI is unset): internal/testkit's gate.
	envSkip string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	env, skip, err := envtest.Start(envtest.Options{})
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
	if k8s, err = kubernetes.NewForConfig(restCfg); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	return m.Run()
}

// needEnv skips the test when the suite's apiserver did not start: short
// mode, or the envtest binaries are absent (outside CI).
func needEnv(t *testing.T) {
	t.Helper()
	if envSkip != "" {
		t.Skip(envSkip)
	}
}

// eventually polls check every 50ms until it returns nil, and fails the
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
		time.Sleep(50 * time.Millisecond)
	}
}

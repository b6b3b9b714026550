package k8smeta_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The envtest suite: a real etcd and kube-apiserver (`make envtest-assets`,
// found as internal/controller's suite finds them). Nothing but the tests
// acts on objects: no controller-manager, no kubelet, no scheduler, so the
// tests write pod status (podIP, phase) through the status subresource
// themselves and set owner references by hand.

var (
	restCfg *rest.Config
	k8s     kubernetes.Interface
	// envSkip, when not empty, is why the envtest tests skip: the binaries
	// are missing and CI is unset.
	envSkip string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
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
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
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
	if k8s, err = kubernetes.NewForConfig(restCfg); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	return m.Run()
}

// needEnv skips the test when the envtest binaries are absent (outside CI).
func needEnv(t *testing.T) {
	t.Helper()
	if envSkip != "" {
		t.Skip(envSkip)
	}
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

// Package testkit is the one gate for tests that need more than Go: root
// (BPF, network namespaces, veths, nftables), envtest's kube-apiserver and
// etcd, or another program (Prometheus, kwok). Every such test asks here
// first, so the policy is the same everywhere:
//
//   - short mode (go test -short, or FLOWLENS_TEST_SHORT=1, as
//     `make test-short` sets both): skip, saying so;
//   - the need is met: run;
//   - it is not, outside CI: skip, saying what is missing and how to get it;
//   - it is not, in CI (CI set, as GitHub Actions sets it): fail. CI never
//     skips a kernel or cluster test silently.
//
// Sub-packages: packet (frames for BPF_PROG_TEST_RUN), envtest (an
// apiserver and etcd for a test or a TestMain) and kafkatest (a Kafka
// broker). StartOwned starts a helper process that dies with the tests.
package testkit

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// ShortEnv is the variable that selects short mode like -short does.
const ShortEnv = "FLOWLENS_TEST_SHORT"

// Short reports whether only the tests that need no root, kernel feature or
// external program run: go test -short, or FLOWLENS_TEST_SHORT set (not "0"
// or "false"). Called from a TestMain before m.Run, it parses the command
// line first, as m.Run would.
func Short() bool {
	if truthy(os.Getenv(ShortEnv)) {
		return true
	}
	if testing.Testing() && !flag.Parsed() {
		flag.Parse()
	}
	return testing.Short()
}

// CI reports whether the tests run in CI: CI set, not "0" or "false".
func CI() bool { return truthy(os.Getenv("CI")) }

func truthy(v string) bool { return v != "" && v != "0" && v != "false" }

// Gate decides for a test that needs what (e.g. "root (BPF)"): missing is
// nil when the need is met, else why not (and how to meet it). It returns
// skip, the reason to skip, or fail, why the test must fail instead (in CI);
// both empty, the test runs. For a TestMain; tests call Need.
func Gate(what string, missing error) (skip string, fail error) {
	switch {
	case Short():
		return fmt.Sprintf("needs %s: skipped in short mode (-short or %s=1)", what, ShortEnv), nil
	case missing == nil:
		return "", nil
	case CI():
		return "", fmt.Errorf("needs %s: %v (CI=%s: CI must run this test, not skip it)", what, missing, os.Getenv("CI"))
	default:
		return fmt.Sprintf("needs %s: %v", what, missing), nil
	}
}

// Need skips or fails t as Gate decides.
func Need(t testing.TB, what string, missing error) {
	t.Helper()
	skip, fail := Gate(what, missing)
	if fail != nil {
		t.Fatal(fail)
	}
	if skip != "" {
		t.Skip(skip)
	}
}

// NeedRoot gates a test that needs root for what (e.g. "BPF", "network
// namespaces"): loading BPF programs and maps, creating namespaces, veths,
// nftables rules.
func NeedRoot(t testing.TB, what string) {
	t.Helper()
	Need(t, "root ("+what+")", RootMissing())
}

// RootMissing is nil when the process runs as root, else why not.
func RootMissing() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root (euid %d): run as root, e.g. `sudo go test` or `make test`", os.Geteuid())
	}
	return nil
}

// ModuleRoot returns the directory of this module's go.mod, searched
// upwards from the working directory (a test's is its package directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && isModule(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of github.com/flowlens/flowlens above the working directory")
		}
		dir = parent
	}
}

// isModule reports whether go.mod content b declares this module.
func isModule(b []byte) bool {
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := bytes.Fields(line); len(f) == 2 && string(f[0]) == "module" && string(f[1]) == Module {
			return true
		}
	}
	return false
}

// Module is this repository's module path.
const Module = "github.com/flowlens/flowlens"

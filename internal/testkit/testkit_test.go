package testkit_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/testkit"
)

func TestGate(t *testing.T) {
	missing := errors.New("no frobnicator")
	t.Run("short", func(t *testing.T) {
		t.Setenv(testkit.ShortEnv, "1")
		t.Setenv("CI", "true")
		for _, m := range []error{nil, missing} {
			skip, fail := testkit.Gate("frobnicator", m)
			if fail != nil || !strings.Contains(skip, "short mode") || !strings.Contains(skip, "frobnicator") {
				t.Errorf("missing=%v: skip %q, fail %v", m, skip, fail)
			}
		}
	})
	if testing.Short() {
		return // -short wins over everything below
	}
	for _, c := range []struct {
		name, ci, short string
		missing         error
		skip, fail      bool
	}{
		{name: "met", missing: nil},
		{name: "met in CI", ci: "true", missing: nil},
		{name: "short env 0 is not short", short: "0", missing: nil},
		{name: "missing", missing: missing, skip: true},
		{name: "missing, CI=false", ci: "false", missing: missing, skip: true},
		{name: "missing in CI", ci: "true", missing: missing, fail: true},
		{name: "missing in CI, any value", ci: "1", missing: missing, fail: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("CI", c.ci)
			t.Setenv(testkit.ShortEnv, c.short)
			skip, fail := testkit.Gate("frobnicator", c.missing)
			if (skip != "") != c.skip || (fail != nil) != c.fail {
				t.Fatalf("skip %q, fail %v; want skip %v, fail %v", skip, fail, c.skip, c.fail)
			}
			for _, msg := range []string{skip, errString(fail)} {
				if msg != "" && !strings.Contains(msg, "no frobnicator") {
					t.Errorf("%q does not say what is missing", msg)
				}
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestRootMissing(t *testing.T) {
	if err := testkit.RootMissing(); (err == nil) != (os.Geteuid() == 0) {
		t.Fatalf("euid %d: %v", os.Geteuid(), err)
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "testkit", "testkit.go")); err != nil {
		t.Fatalf("root %s: %v", root, err)
	}
}

//go:build chaos

package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit/promtest"
	dto "github.com/prometheus/client_model/go"
)

// bin holds the binaries TestMain builds once for every case:
// bin["flowlens-agent"], bin["flowlens-collector"], bin["flowlens"].
var bin = map[string]string{}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flowlens-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := 2
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: building the binaries:", err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// build compiles each command of cmd/ into dir.
func build(dir string) error {
	for _, name := range []string{"flowlens-agent", "flowlens-collector", "flowlens"} {
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", out, "github.com/flowlens/flowlens/cmd/"+name)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		bin[name] = out
	}
	return nil
}

// tail is the last n bytes of s, for a log in a failure message.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// tailFile is tail of the file's contents ("" when it cannot be read).
func tailFile(file string, n int) string {
	b, _ := os.ReadFile(file)
	return tail(string(b), n)
}

// waitFor polls cond every 100 ms until it holds, failing t after limit
// with cond's last word.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %s", what, limit, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metricSum sums the series of family name whose labels include labels
// ("k=v"), 0 when none does (promtest.Sum).
func metricSum(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	s, _ := promtest.Sum(fams, name, labels...)
	return s
}

//go:build chaos

package chaos

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// restartingCollector is the collector binary, started again after each kill, its
// stdout appended to one file.
type restartingCollector struct {
	t                 *testing.T
	args              []string
	out, log, metrics string
	cmd               *exec.Cmd
}

func (r *restartingCollector) start() {
	t := r.t
	t.Helper()
	out, err := os.OpenFile(r.out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	logf, err := os.OpenFile(r.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	r.cmd = exec.Command(bin["flowlens-collector"], r.args...)
	r.cmd.Stdout, r.cmd.Stderr = out, logf
	if err := testkit.StartOwned(r.cmd); err != nil {
		t.Fatal(err)
	}
	crWaitFor(t, 30*time.Second, "the collector ready", func() bool {
		resp, err := http.Get("http://" + r.metrics + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// kill sends SIGKILL and reaps the process.
func (r *restartingCollector) kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGKILL)
	r.cmd.Wait()
	r.cmd = nil
}

// stop ends the collector with SIGTERM (it flushes its output).
func (r *restartingCollector) stop() {
	r.cmd.Process.Signal(syscall.SIGTERM)
	if err := r.cmd.Wait(); err != nil {
		r.t.Errorf("collector exited with %v", err)
	}
	r.cmd = nil
}

// waitFor polls cond every 20 ms, failing t after d.
func crWaitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// crScrape reads a series, written as in the exposition
// (name{k="v",...}), from a metrics endpoint: the sum of the family's
// series with those labels, whatever others they have (a reason label);
// absent is an error.
func crScrape(t *testing.T, addr, series string) float64 {
	t.Helper()
	name, labels := series, []string(nil)
	if n, ls, ok := strings.Cut(series, "{"); ok {
		name = n
		for _, l := range strings.Split(strings.TrimSuffix(ls, "}"), ",") {
			k, v, _ := strings.Cut(l, "=")
			labels = append(labels, k+"="+strings.Trim(v, `"`))
		}
	}
	v, ok := promtest.Sum(scrape(t, "http://"+addr+"/metrics"), name, labels...)
	if !ok {
		t.Fatalf("%s: no series %s", addr, series)
	}
	return v
}

func crTail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

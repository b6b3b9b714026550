//go:build chaos

package chaos

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit"
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

// scrape reads one series (its exposition name with labels) from a
// metrics endpoint; absent is an error.
func crScrape(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s: no series %s", addr, series)
	return 0
}

func crTail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

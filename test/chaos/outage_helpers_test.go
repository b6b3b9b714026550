//go:build chaos

package chaos

// What the outage cases (kafka_outage_test.go, apiserver_outage_test.go)
// share: a binary run as a child process with its output and log in
// files, its /metrics scraped, its JSON lines read back.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
)

// proc is one of the binaries running as a child: its stdout in out, its
// stderr in log, killed at the test's cleanup (its log shown if it failed).
type proc struct {
	name     string
	cmd      *exec.Cmd
	out, log string
	metrics  string // host:port of its metrics server
	exited   chan struct{}
}

// startProc runs bin with args (after --metrics-address on a free port).
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{name: name, out: filepath.Join(dir, name+".out"), log: filepath.Join(dir, name+".log"),
		metrics: testkit.FreeAddr(t), exited: make(chan struct{})}
	out, err := os.Create(p.out)
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, append([]string{"--metrics-address=" + p.metrics}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = out, logf
	if err := testkit.StartOwned(p.cmd); err != nil {
		t.Fatal(err)
	}
	out.Close()
	logf.Close()
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		if p.running() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(20 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
		if t.Failed() {
			t.Logf("%s log (last 6000 bytes):\n%s", name, tailFile(p.log, 6000))
		}
	})
	return p
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// alive fails t if the process exited (it must recover by itself, never
// by a restart).
func (p *proc) alive(t *testing.T) {
	t.Helper()
	if !p.running() {
		t.Fatalf("%s exited (%v): it must ride the outage out", p.name, p.cmd.ProcessState)
	}
}

// waitReady polls /readyz until it answers 200.
func (p *proc) waitReady(t *testing.T, limit time.Duration) {
	t.Helper()
	waitFor(t, limit, p.name+" ready", func() (bool, string) {
		p.alive(t)
		code, body := get("http://" + p.metrics + "/readyz")
		return code == 200, fmt.Sprintf("/readyz: %d %s", code, body)
	})
}

// scrape parses the process's /metrics.
func (p *proc) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get("http://" + p.metrics + "/metrics")
	if code != 200 {
		t.Fatalf("%s /metrics: %d %s", p.name, code, body)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s /metrics: %v", p.name, err)
	}
	return fams
}

// value is the series of name with exactly labels ("k=v", sorted), 0 when absent.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) uint64 {
	return uint64(metricSum(fams, name, labels...))
}

// logHas reports whether the process logged s.
func (p *proc) logHas(s string) bool {
	b, _ := os.ReadFile(p.log)
	return strings.Contains(string(b), s)
}

// logCount is how many lines of the log hold s.
func (p *proc) logCount(s string) int {
	b, _ := os.ReadFile(p.log)
	return strings.Count(string(b), s)
}

// get is an HTTP GET's status and body (0 and the error when it fails).
func get(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// outFlow is one JSON line of an agent's stdout or of the collector's
// --output json: the agent's fields and the collector's additions.
type outFlow struct {
	agenttest.JSONFlow
	NodeName string    `json:"node_name"`
	SrcK8s   *k8sField `json:"src_k8s"`
	DstK8s   *k8sField `json:"dst_k8s"`
}

// k8sField is the collector's src_k8s/dst_k8s.
type k8sField struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Workload  string `json:"workload"`
	Node      string `json:"node"`
}

// key identifies one record the agent evicted: a flow split over two
// evictions has two records (other times); a record handled twice has
// the same key.
func (f outFlow) key(node string) string {
	start, _ := time.Parse(time.RFC3339Nano, f.StartTime)
	end, _ := time.Parse(time.RFC3339Nano, f.EndTime)
	return fmt.Sprint(node, " ", f.SrcAddr, ":", f.SrcPort, ">", f.DstAddr, ":", f.DstPort, "/", f.Proto,
		" p=", f.Packets, " b=", f.Bytes, " ", start.UnixNano(), "-", end.UnixNano())
}

// flows decodes the complete JSON lines of the process's stdout (a line
// being written as it reads is left for the next call).
func (p *proc) flows(t *testing.T) []outFlow {
	t.Helper()
	b, err := os.ReadFile(p.out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	s = s[:strings.LastIndexByte(s, '\n')+1]
	var out []outFlow
	for line := range strings.Lines(s) {
		var f outFlow
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("%s printed a bad JSON line %q: %v", p.name, line, err)
		}
		out = append(out, f)
	}
	return out
}

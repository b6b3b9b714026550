//go:build soak

package soak

import (
	"bufio"
	"context"
	"encoding/csv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// TestSoak runs the real agent and collector for SOAK_DURATION (default 1h)
// under mixed traffic and namespace churn, samples them every SOAK_INTERVAL
// (default 10s) into SOAK_OUT/soak.csv, and fails when a gated series is
// not flat over the last three quarters of the run (gates, below).
func TestSoak(t *testing.T) {
	netlab.Require(t)
	dur := envDuration(t, "SOAK_DURATION", time.Hour)
	every := envDuration(t, "SOAK_INTERVAL", 10*time.Second)
	out := os.Getenv("SOAK_OUT")
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := buildBinaries(t)

	// The lab: cli <-> srv over one veth pair, named namespaces in a
	// directory of the test's own that the agent watches (--netns all).
	dir := t.TempDir()
	cli, srv := netlab.NewNetnsIn(t, dir, "cli"), netlab.NewNetnsIn(t, dir, "srv")
	netlab.Quiet(t, cli)
	netlab.Quiet(t, srv)
	netlab.Veth(t, cli, "fls-c0", srv, "fls-s0")
	netlab.AddAddr(t, cli, "fls-c0", "10.99.0.1/24")
	netlab.AddAddr(t, srv, "fls-s0", "10.99.0.2/24")
	netlab.AddAddr(t, srv, "fls-s0", "10.99.0.3/24") // the DNS server that never answers

	coll := startCollector(t, bin["flowlens-collector"], out)
	agent := startAgent(t, bin["flowlens-agent"], out, dir, coll.addr)

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	tr := startTraffic(t, ctx, cli, srv, dir)

	f, err := os.Create(filepath.Join(out, "soak.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write(columns)
	bpf := newBPFTracker()
	start := time.Now()
	var rows [][]float64
	var lastExported, lastReceived, lastPartial, totalExported float64
	tick := time.NewTicker(every)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			continue
		case <-tick.C:
		}
		s, err := sample(agent, coll, bpf, tr)
		if err != nil {
			t.Fatalf("sample at %s: %v", time.Since(start).Round(time.Second), err)
		}
		s["elapsed_s"] = time.Since(start).Seconds()
		exp, recv := s["agent_exported_flows"], s["collector_received_flows"]
		part := s["agent_partial_flows"]
		s["agent_exported_flows"], s["collector_received_flows"], s["agent_partial_flows"] = exp-lastExported, recv-lastReceived, part-lastPartial
		lastExported, lastReceived, lastPartial = exp, recv, part
		totalExported = exp
		row := make([]float64, len(columns))
		rec := make([]string, len(columns))
		for i, c := range columns {
			row[i] = s[c]
			rec[i] = strconv.FormatFloat(s[c], 'f', -1, 64)
		}
		rows = append(rows, row)
		w.Write(rec)
		w.Flush()
		if len(rows)%30 == 1 {
			t.Logf("%6.0fs agent rss %.1f MiB, %v goroutines, %v fds, bpf %v/%v/%v (alive %v); collector rss %.1f MiB, %v goroutines; netns created %v",
				s["elapsed_s"], s["agent_rss_kib"]/1024, s["agent_goroutines"], s["agent_fds"], s["agent_bpf_progs"], s["agent_bpf_maps"],
				s["agent_bpf_links"], s["agent_bpf_alive"], s["collector_rss_kib"]/1024, s["collector_goroutines"], s["netns_created"])
		}
	}
	cancel()
	tr.wait()
	if err := w.Error(); err != nil {
		t.Fatal(err)
	}

	// After the agent exits, none of the BPF objects it ever held may stay
	// in the kernel (a filter left on an interface would keep its program).
	agent.stop(t)
	var alive int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if alive = bpf.alive(); alive == 0 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("after the agent stopped: %d of the %d BPF objects it held still in the kernel", alive, bpf.seen())
	if alive != 0 {
		t.Errorf("%d BPF objects of the stopped agent still in the kernel", alive)
	}
	coll.stop(t)
	<-coll.eof
	t.Logf("flows: the agent had exported %.0f by the last sample; the collector wrote %d (the agent's last flush included)", totalExported, coll.lines.Load())

	summary, ok := Analyse(columns, rows, dur)
	os.WriteFile(filepath.Join(out, "soak-summary.txt"), []byte(summary), 0o644)
	t.Log("\n" + summary)
	if !ok {
		t.Error("a gated series is not flat (above)")
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration (1h, 10m)", name, v)
	}
	return d
}

// buildBinaries compiles the agent and the collector into a temporary dir.
func buildBinaries(t *testing.T) map[string]string {
	dir := t.TempDir()
	bin := map[string]string{}
	for _, name := range []string{"flowlens-agent", "flowlens-collector"} {
		out := filepath.Join(dir, name)
		if b, err := exec.Command("go", "build", "-o", out, "github.com/flowlens/flowlens/cmd/"+name).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, b)
		}
		bin[name] = out
	}
	return bin
}

type proc struct {
	cmd     *exec.Cmd
	addr    string        // gRPC listen address (the collector)
	metrics string        // host:port of /metrics
	lines   atomic.Int64  // lines of the collector's output (one per flow)
	eof     chan struct{} // closed when the collector's output is read to its end
	waited  chan struct{}
	werr    error
}

func (p *proc) start(t *testing.T) {
	if err := testkit.StartOwned(p.cmd); err != nil {
		t.Fatal(err)
	}
	p.waited = make(chan struct{})
	go func() { p.werr = p.cmd.Wait(); close(p.waited) }()
}

func (p *proc) exited() bool {
	select {
	case <-p.waited:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to 30 s (then SIGKILL).
func (p *proc) stop(t *testing.T) {
	if p.exited() {
		t.Errorf("%s had already exited: %v", filepath.Base(p.cmd.Path), p.werr)
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.waited:
		if p.werr != nil {
			t.Errorf("%s: %v", filepath.Base(p.cmd.Path), p.werr)
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.waited
		t.Errorf("%s did not stop within 30 s of SIGTERM", filepath.Base(p.cmd.Path))
	}
}

// startCollector runs the collector on loopback (plaintext, no Kubernetes);
// its JSON output is counted, line by line, and thrown away.
func startCollector(t *testing.T, path, out string) *proc {
	p := &proc{addr: testkit.FreeAddr(t), metrics: testkit.FreeAddr(t)}
	p.cmd = exec.Command(path, "--listen", p.addr, "--insecure-plaintext", "--output", "json",
		"--k8s-enrich=false", "--metrics-address", p.metrics)
	logf, err := os.Create(filepath.Join(out, "soak-collector.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	p.cmd.Stderr = logf
	// A pipe of our own rather than StdoutPipe: Wait would close that one
	// before the last lines are read.
	stdout, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = pw
	p.start(t)
	pw.Close()
	p.eof = make(chan struct{})
	t.Cleanup(func() {
		if !p.exited() {
			p.cmd.Process.Kill()
			<-p.waited
		}
	})
	go func() {
		defer close(p.eof)
		defer stdout.Close()
		r := bufio.NewReaderSize(stdout, 1<<16)
		for {
			b, err := r.ReadSlice('\n')
			if err == nil {
				p.lines.Add(1)
			} else if err != bufio.ErrBufferFull {
				if err != io.EOF {
					t.Logf("collector stdout: %v", err)
				}
				return
			}
			_ = b
		}
	}()
	waitFor(t, 20*time.Second, "the collector's /metrics", func() bool { _, err := scrape(p.metrics); return err == nil })
	return p
}

// startAgent runs the agent on every namespace of dir, on the lab's
// interfaces only (fls-*), exporting over gRPC to the collector. Every
// feature but drops: its hook (kfree_skb) sees every drop on the host,
// whatever --netns and --interfaces say, so another test's flood on a
// shared machine (hundreds of thousands of packets dropped a second) turns
// into as many partial records here and swamps the soak's own figures.
// RTT and retransmits see every TCP socket of the host too, at the rate of
// other work's TCP; agent_partial_flows shows what they add.
func startAgent(t *testing.T, path, out, dir, target string) *proc {
	p := &proc{metrics: testkit.FreeAddr(t)}
	p.cmd = exec.Command(path, "--netns", "all", "--netns-dir", dir, "--interfaces", "/^fls-/",
		"--features", "rtt,retransmits,dns", "--export", "grpc", "--target", target, "--insecure-plaintext",
		"--metrics-address", p.metrics, "--log-level", "info")
	logPath := filepath.Join(out, "soak-agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.start(t)
	t.Cleanup(func() {
		if !p.exited() {
			p.cmd.Process.Kill()
			<-p.waited
		}
	})
	waitFor(t, 30*time.Second, "the agent attached to fls-c0 and fls-s0", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Count(string(b), "msg=attached") >= 2 || strings.Count(string(b), "INFO attached") >= 2
	})
	return p
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	for deadline := time.Now().Add(d); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// scrape reads a /metrics endpoint: each series by its full name (labels
// as written) and each metric summed over its labels.
func scrape(addr string) (map[string]float64, error) {
	resp, err := httpClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := f[0]
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			m[name] = v // one series, labels and all
			name = name[:i]
		}
		m[name] += v
	}
	return m, sc.Err()
}

//go:build chaos

package chaos

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// memCgroup is a memory cgroup of its own for a child process: cgroup v2
// when the memory controller is there, else cgroup v1's memory hierarchy
// (hosts with hybrid mounts, where memory.max does not exist).
type memCgroup struct {
	dir string
	v2  bool
}

// newMemCgroup creates a memory cgroup named after the test with limit
// bytes of memory (memory.max, or v1's memory.limit_in_bytes) and removes
// it when the test ends (its processes must have exited).
func newMemCgroup(t *testing.T, limit int64) *memCgroup {
	t.Helper()
	name := fmt.Sprintf("fltest-flood-%d", os.Getpid())
	c := &memCgroup{}
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(b), "memory") {
		c.v2, c.dir = true, filepath.Join("/sys/fs/cgroup", name)
		// The root must hand the memory controller to its children.
		if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory"), 0); err != nil {
			t.Fatalf("enable the memory controller: %v", err)
		}
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		c.dir = filepath.Join("/sys/fs/cgroup/memory", name)
	} else {
		t.Fatal("no memory cgroup controller (neither cgroup v2 nor v1)")
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; ; i++ { // the last pages of a dead process go with a short delay
			err := os.Remove(c.dir)
			if err == nil || i == 50 {
				if err != nil {
					t.Errorf("remove cgroup %s: %v", c.dir, err)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	file := "memory.limit_in_bytes"
	if c.v2 {
		file = "memory.max"
	}
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return c
}

// wrap returns the command line that runs argv inside the cgroup from its
// first instruction: a shell moves itself in, then execs argv (same pid).
func (c *memCgroup) wrap(argv ...string) []string {
	return append([]string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(c.dir, "cgroup.procs")}, argv...)
}

// peak is the cgroup's peak memory use in bytes (memory.peak, v1's
// memory.max_usage_in_bytes): everything charged to it, BPF maps included.
func (c *memCgroup) peak(t *testing.T) int64 {
	t.Helper()
	file := "memory.max_usage_in_bytes"
	if c.v2 {
		file = "memory.peak"
	}
	return readInt(t, filepath.Join(c.dir, file))
}

// oomKills is the number of processes the OOM killer killed in the cgroup
// (memory.events, v1's memory.oom_control: the oom_kill line).
func (c *memCgroup) oomKills(t *testing.T) int64 {
	t.Helper()
	file := "memory.oom_control"
	if c.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("%s: no oom_kill line in %q", file, b)
	return 0
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// vmHWM is a process's peak resident set size in bytes (/proc/pid/status).
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// newFlooder is netlab.NewFlooder past the qdisc (bypass: the peer's
// ingress hook is what the flood measures), closed when the test ends.
func newFlooder(t *testing.T, ns *netlab.Netns, ifname string, srcMAC, dstMAC net.HardwareAddr, src, dst net.IP) *netlab.Flooder {
	t.Helper()
	f, err := netlab.NewFlooder(ns, ifname, srcMAC, dstMAC, src, dst, true)
	if err != nil {
		t.Fatalf("flood socket: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// scrape reads a Prometheus text endpoint.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return fams
}

// progStats is, per BPF program (its "program" label), the run time and
// runs the agent's metrics report (flowlens_agent_bpf_program_*).
func progStats(fams map[string]*dto.MetricFamily) map[string][2]float64 {
	out := map[string][2]float64{}
	for _, name := range []string{"flowlens_agent_bpf_program_run_time_seconds_total", "flowlens_agent_bpf_program_runs_total"} {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			var prog string
			for _, l := range m.GetLabel() {
				if l.GetName() == "program" {
					prog = l.GetName() + "=" + l.GetValue()
				}
			}
			v := out[prog]
			if strings.HasSuffix(name, "seconds_total") {
				v[0] += m.GetCounter().GetValue()
			} else {
				v[1] += m.GetCounter().GetValue()
			}
			out[prog] = v
		}
	}
	return out
}

// progCost says, for each program that ran between two progStats, its
// mean time per run in ns and its runs (the flood's per-packet kernel cost).
func progCost(before, after map[string][2]float64) string {
	var parts []string
	for prog, a := range after {
		b := before[prog]
		if runs := a[1] - b[1]; runs > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f ns/run (%.0f runs)", strings.TrimPrefix(prog, "program="), (a[0]-b[0])*1e9/runs, runs))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

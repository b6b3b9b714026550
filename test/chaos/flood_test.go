//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// The flood's length and its goal (issue #28): at least 500,000 new flows a
// second for 30 s. The rate reached is logged; below the goal the test
// says so (a 2-core runner shares its cores between the sender, the
// kernel's receive path and the agent) but still checks every bound.
const (
	floodFor  = 30 * time.Second
	floodGoal = 500_000
)

// A new-flow flood into a small flow map, with one exporter whose collector
// accepts connections and never reads: the agent, in a memory cgroup with
// the DaemonSet's default limit, stays under it (the cgroup's peak and the
// process's VmHWM), is not OOM-killed, still exports afterwards, and every
// packet its hook saw is accounted for: the packets of the flows it wrote
// on stdout plus those it counted as lost, by reason, equal the packets
// the veth delivered to the hook, exactly.
func TestNewFlowFlood(t *testing.T) {
	netlab.Require(t)
	res := render.DefaultResources()
	limit := res.Limits.Memory().Value() // the DaemonSet's limit
	cg := newMemCgroup(t, limit)

	p := agenttest.NewPair(t)
	srcMAC := p.MACA(t)
	otherHost := net.HardwareAddr{0x02, 0, 0, 0, 0xf1, 0x00}

	// The stuck collector: accepts, never reads.
	stuck, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var heldMu sync.Mutex
	go func() {
		for {
			c, err := stuck.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c)
			heldMu.Unlock()
		}
	}()
	t.Cleanup(func() {
		stuck.Close()
		heldMu.Lock()
		for _, c := range held {
			c.Close()
		}
		heldMu.Unlock()
	})

	metricsAddr := testkit.FreeAddr(t)
	argv := cg.wrap(bin["flowlens-agent"], "--netns="+p.B.Name, "--interfaces="+p.IfB,
		"--cache-max-flows=1024", "--export=stdout,grpc", "--target="+stuck.Addr().String(),
		"--metrics-address="+metricsAddr)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=") // the agent sets it from the cgroup
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := testkit.StartOwned(cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var readDone sync.WaitGroup
	// stdout is read as it comes (a file would put its page cache on the
	// agent's cgroup): the packets of every record, and the probe's.
	var delivered, records, probe atomic.Uint64
	readDone.Add(1)
	go func() {
		defer readDone.Done()
		r := bufio.NewReaderSize(out, 1<<20)
		for {
			line, err := r.ReadSlice('\n')
			if len(line) > 0 {
				n := jsonUint(line, `,"packets":`)
				delivered.Add(n)
				records.Add(1)
				if bytes.Contains(line, []byte(`"src_addr":"10.99.0.3"`)) {
					probe.Add(n)
				}
			}
			if err == bufio.ErrBufferFull {
				t.Errorf("stdout line longer than 1 MiB")
				io.Copy(io.Discard, r)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("agent log (tail):\n%s", tail(stderr.String(), 4000))
		}
	})
	go func() { readDone.Wait(); exited <- cmd.Wait() }()

	url := "http://" + metricsAddr + "/metrics"
	waitFor(t, 20*time.Second, "the agent attached to "+p.IfB, func() (bool, string) {
		return strings.Contains(stderr.String(), "attached interface="+p.IfB), ""
	})
	waitFor(t, 10*time.Second, "the metrics endpoint", func() (bool, string) {
		ok, err := httpGet(url)
		return err == nil && ok, fmt.Sprint(err)
	})
	rx0, _, tx0, _ := netlab.LinkStats(p.B, p.IfB)
	stats0 := progStats(scrape(t, url))

	// The flood: one sender per CPU, each its own socket and flows.
	senders := runtime.NumCPU()
	var total atomic.Uint64
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	start := time.Now()
	for i := range senders {
		f := newFlooder(t, p.A, p.IfA, srcMAC, otherHost, net.ParseIP(p.IPA), net.ParseIP(p.IPB))
		f.Next = uint64(i) << 31 // distinct ports: up to 2^31 flows each
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := f.Flood(floodFor, 0)
			total.Add(n)
			errs <- err
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("flood: %v", err)
		}
	}
	stats1 := progStats(scrape(t, url))
	sent := total.Load()
	rate := float64(sent) / el.Seconds()
	t.Logf("flood: %d new flows from %d senders in %v: %.0f flows/s (goal %d)", sent, senders, el.Round(time.Millisecond), rate, floodGoal)
	if rate < floodGoal {
		t.Logf("flood: below the goal of %d new flows/s on this machine (%d CPUs shared by the senders, the receive path and the agent)", floodGoal, senders)
	}

	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("flood: BPF programs during the flood: %s; load average after it: %s", progCost(stats0, stats1), strings.TrimSpace(string(load)))

	// Settled: two evictions after the flood, and the lost counts still.
	m := scrape(t, url)
	ev0 := metricSum(m, "flowlens_agent_evictions_total")
	var lost, kernelLost, capLost float64
	waitFor(t, 60*time.Second, "two evictions after the flood with steady loss counts", func() (bool, string) {
		m := scrape(t, url)
		k, c := metricSum(m, "flowlens_agent_overflow_lost_total"), metricSum(m, "flowlens_agent_lost_packets_total")
		l := k + c + metricSum(m, "flowlens_agent_non_ip_packets_total") + metricSum(m, "flowlens_agent_malformed_packets_total")
		ok := metricSum(m, "flowlens_agent_evictions_total") >= ev0+2 && l == lost
		lost, kernelLost, capLost = l, k, c
		return ok, fmt.Sprintf("lost %v", l)
	})

	// Still exporting: a new flow after the flood reaches stdout.
	pf := newFlooder(t, p.A, p.IfA, srcMAC, otherHost, net.ParseIP("10.99.0.3"), net.ParseIP(p.IPB))
	for range 10 {
		if n, err := pf.Send(1); err != nil || n != 1 {
			t.Fatalf("probe: %d %v", n, err)
		}
		pf.Next-- // the same flow each time
	}
	waitFor(t, 30*time.Second, "the probe flow's 10 packets on stdout", func() (bool, string) { return probe.Load() == 10, fmt.Sprint(probe.Load()) })

	hwm := vmHWM(t, cmd.Process.Pid)
	m = scrape(t, url)
	overflowRecs := metricSum(m, "flowlens_agent_overflow_records_total")
	grpcDropped := metricSum(m, "flowlens_agent_export_dropped_flows_total", "exporter=grpc")
	stdoutDropped := metricSum(m, "flowlens_agent_export_dropped_flows_total", "exporter=stdout")

	// Shut down; the flows left in the kernel reach stdout.
	stopped = true
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("agent exited: %v", err)
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatal("agent did not stop within 90 s of SIGTERM")
	}
	rx1, _, tx1, _ := netlab.LinkStats(p.B, p.IfB)
	seen := (rx1 - rx0) + (tx1 - tx0)
	peak, ooms := cg.peak(t), cg.oomKills(t)

	t.Logf("memory: limit %d MiB, cgroup peak %.1f MiB (v2 %v), VmHWM %.1f MiB, oom kills %d",
		limit>>20, float64(peak)/(1<<20), cg.v2, float64(hwm)/(1<<20), ooms)
	t.Logf("packets: hook saw %d (veth rx %d tx %d; sender %d + 10 probe), delivered on stdout %d in %d records, lost %.0f (overflow ring full %.0f, memory bound %.0f); overflow records %.0f; grpc dropped %.0f flows, stdout dropped %.0f",
		seen, rx1-rx0, tx1-tx0, sent, delivered.Load(), records.Load(), lost, kernelLost, capLost, overflowRecs, grpcDropped, stdoutDropped)
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "memory budget") || strings.Contains(line, "memory bound") {
			t.Log(line)
		}
	}
	if ooms != 0 {
		t.Errorf("OOM kills in the agent's cgroup: %d", ooms)
	}
	if peak >= limit {
		t.Errorf("cgroup peak %d bytes: not under the limit %d", peak, limit)
	}
	if hwm >= limit {
		t.Errorf("VmHWM %d bytes: not under the limit %d", hwm, limit)
	}
	if stdoutDropped != 0 {
		t.Errorf("stdout dropped %.0f flows (its packets are not accounted)", stdoutDropped)
	}
	if got := delivered.Load() + uint64(lost); got != seen {
		t.Errorf("delivered %d + lost %.0f = %d, want the %d packets the hook saw (difference %d)",
			delivered.Load(), lost, got, seen, int64(got)-int64(seen))
	}
	if seen != sent+10 {
		t.Errorf("the hook saw %d packets, the sender sent %d", seen, sent+10)
	}
}

// jsonUint is the unsigned number after key in a JSON line (0 if absent).
func jsonUint(line []byte, key string) uint64 {
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return 0
	}
	var n uint64
	for _, c := range line[i+len(key):] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

func httpGet(url string) (bool, error) {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == 200, nil
}

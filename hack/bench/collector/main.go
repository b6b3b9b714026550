// Command bench-collector (make bench-collector) runs flowlens-collector and
// NetObserv's flowlogs-pipeline (FLP, the release hack/bench/peer pins) on
// the same stream of flows, one after the other, each pinned to one core
// (taskset), both enriching from one envtest kube-apiserver holding the same
// pods, ReplicaSets and nodes (every flow's addresses are those pods'), both
// serving Prometheus metrics of the same shape: bytes and packets per
// (source namespace, workload, destination namespace, workload).
//
// One generator (this process) encodes the flows twice, ahead of time: as
// flowlens FlowBatch messages on the Export stream of its agents, and as
// NetObserv's pbflow Records on the unary Collector.Send its agent calls
// (the records as NetObserv's agent writes them: see hack/bench/peer/sink),
// the same number of flows per message. Each run of a target:
//
//   - starts it (taskset -c -core), sends a warm-up and waits until its
//     metrics hold every warm-up byte, enriched (informers synced);
//   - paced: -rate flows/s for -secs seconds; CPU per flow from
//     /proc/<pid>/stat (user+system) over the phase, which ends when the
//     metrics hold every byte sent;
//   - max: -max-flows flows sent as fast as the target takes them (both
//     ingests push back: FLP's gRPC handler blocks on its ingest channel,
//     flowlens' stream on its flow control); flows/s from the first send
//     to the moment the metrics hold every byte; CPU per flow again;
//   - peak RSS (VmHWM) at the end;
//   - the exactness check: each (namespace, workload) pair's bytes and
//     packets in the metrics against what the generator sent.
//
// Runs alternate between the targets (flowlens first in even runs); it
// prints each run, then medians with min..max and the ratio, and writes
// JSON to -out. Root is not needed; envtest's binaries are (make
// envtest-assets).
//
//	bench-collector -collector bin/flowlens-collector -flp bin/flowlogs-pipeline -runs 5
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit/envtest"
)

type result struct {
	Target     string  `json:"target"`
	Run        int     `json:"run"`
	PacedFlows int     `json:"paced_flows"`
	PacedRate  float64 `json:"paced_rate"`   // flows/s achieved over the paced phase
	PacedCPUNs float64 `json:"paced_cpu_ns"` // CPU ns per flow, paced
	MaxFlows   int     `json:"max_flows"`
	MaxRate    float64 `json:"max_rate"`   // flows/s, unpaced
	MaxCPUNs   float64 `json:"max_cpu_ns"` // CPU ns per flow, unpaced
	// MaxBusy is the target's core's busy share in the max phase (rate ×
	// CPU per flow): below 1, the generator, not the target, set the rate.
	MaxBusy      float64 `json:"max_busy"`
	PeakRSSMB    float64 `json:"peak_rss_mb"`
	Series       int     `json:"series"` // series of the bytes metric
	ExactPairs   int     `json:"exact_pairs"`
	WrongPairs   int     `json:"wrong_pairs"`
	StartupSecs  float64 `json:"startup_s"` // start to warm-up counted
	CPUStartSecs float64 `json:"startup_cpu_s"`
	// The scrapes' share, subtracted from the CPU per flow above: CPU per
	// scrape of the metrics (measured after the phases, 20 in a row) and
	// the scrapes each phase made to see its end.
	ScrapeCPUMs  float64 `json:"scrape_cpu_ms"`
	PacedScrapes int     `json:"paced_scrapes"`
	MaxScrapes   int     `json:"max_scrapes"`
	IdleCPUPct   float64 `json:"idle_cpu_pct"` // CPU while idle, % of a core over 2 s
}

func main() {
	testing.Init() // internal/testkit's gate reads testing.Short
	collector := flag.String("collector", "", "flowlens-collector binary")
	flp := flag.String("flp", "", "flowlogs-pipeline binary (hack/bench/peer)")
	base := flag.String("collector-base", "", "another flowlens-collector binary, target flowlens-base (an A/B of a change)")
	runs := flag.Int("runs", 5, "runs per target")
	rate := flag.Int("rate", 10000, "paced phase: flows per second")
	secs := flag.Int("secs", 10, "paced phase: seconds")
	maxFlows := flag.Int("max-flows", 300000, "max phase: flows sent unpaced")
	batch := flag.Int("batch", 1000, "flows per message")
	distinct := flag.Int("flows", 20000, "distinct flows (5-tuples) the stream cycles through")
	nsN := flag.Int("namespaces", 10, "namespaces")
	wlN := flag.Int("workloads", 5, "workloads (Deployments) per namespace")
	podN := flag.Int("replicas", 4, "pods per workload")
	core := flag.Int("core", 1, "the core each target is pinned to")
	targets := flag.String("targets", "flowlens,flowlens-nohist,flp", "targets, in the order of even runs (flowlens-nohist: flowlens with --history-size 0)")
	extra := flag.String("collector-args", "", "extra flowlens-collector flags, space-separated")
	out := flag.String("out", "", "directory for collector.json")
	flag.Parse()
	log.SetFlags(log.Ltime)
	if *collector == "" && *flp == "" {
		log.Fatal("need -collector and/or -flp")
	}

	env, skip, err := envtest.Start(envtest.Options{})
	if err != nil || skip != "" {
		log.Fatalf("envtest: %v %s", err, skip)
	}
	defer env.Stop()
	dir, err := os.MkdirTemp("", "bench-collector")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(env.Config, kubeconfig); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	cl, err := populate(ctx, env.Config, *nsN, *wlN, *podN)
	if err != nil {
		log.Fatal(err)
	}
	gen := newGenerator(cl, *distinct, *batch)
	log.Printf("cluster: %d pods in %d namespaces, %d workloads; %d distinct flows, %d per message",
		len(cl.pods), *nsN, *nsN**wlN, *distinct, *batch)

	var all []result
	names := strings.Split(*targets, ",")
	for r := range *runs {
		order := slices.Clone(names)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			var t target
			switch name {
			case "flowlens":
				t = &flowlensTarget{bin: *collector, kubeconfig: kubeconfig, extra: strings.Fields(*extra)}
			case "flowlens-base":
				t = &flowlensTarget{label: name, bin: *base, kubeconfig: kubeconfig, extra: strings.Fields(*extra)}
			case "flowlens-nohist":
				t = &flowlensTarget{label: name, bin: *collector, kubeconfig: kubeconfig,
					extra: append([]string{"--history-size", "0"}, strings.Fields(*extra)...)}
			case "flp":
				t = &flpTarget{bin: *flp, kubeconfig: kubeconfig, dir: dir}
			default:
				log.Fatalf("unknown target %q", name)
			}
			res, err := runOne(ctx, t, gen, r, *core, *rate, *secs, *maxFlows)
			if err != nil {
				log.Fatalf("run %d %s: %v", r, name, err)
			}
			log.Printf("run %d %-15s paced %6.0f flows/s %6.0f ns/flow | max %7.0f flows/s %6.0f ns/flow core %3.0f%% | RSS %5.1f MB | start %.2fs %.2f CPU s | idle %.1f%% | scrape %.1f ms ×%d,%d | series %d, pairs exact %d wrong %d",
				r, name, res.PacedRate, res.PacedCPUNs, res.MaxRate, res.MaxCPUNs, 100*res.MaxBusy, res.PeakRSSMB,
				res.StartupSecs, res.CPUStartSecs, res.IdleCPUPct, res.ScrapeCPUMs, res.PacedScrapes, res.MaxScrapes,
				res.Series, res.ExactPairs, res.WrongPairs)
			all = append(all, res)
		}
	}
	summarize(all, names)
	if *out != "" {
		b, _ := json.MarshalIndent(all, "", "  ")
		if err := os.WriteFile(filepath.Join(*out, "collector.json"), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// target is one of the two processes under test.
type target interface {
	name() string
	// start starts the process pinned to core; it returns the command and
	// where the generator sends to and scrapes.
	start(core int) (*exec.Cmd, error)
	send(ctx context.Context, msgs [][]byte) error
	metrics() (bytesName, packetsName string, labels []string, url string)
	encode(g *generator, flows []int) [][]byte
	close()
}

func runOne(ctx context.Context, t target, g *generator, run, core, rate, secs, maxFlows int) (result, error) {
	res := result{Target: t.name(), Run: run}
	t0 := time.Now()
	cmd, err := t.start(core)
	if err != nil {
		return res, err
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		t.close()
	}()
	pid := cmd.Process.Pid
	bytesName, packetsName, labels, url := t.metrics()
	sc := &scraper{url: url, bytesName: bytesName, packetsName: packetsName, labels: labels}
	want := newTotals()

	// Warm-up: until the target takes flows and its metrics hold them
	// enriched (the informers synced).
	warm := g.flows(0, 2*g.batch)
	warmMsgs := t.encode(g, warm)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := t.send(ctx, warmMsgs); err == nil {
			g.add(want, warm)
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("not taking flows after 60 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := sc.waitFor(want, 60*time.Second, true); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	res.StartupSecs = time.Since(t0).Seconds()
	cpu0, err := cpuTime(pid)
	if err != nil {
		return res, err
	}
	res.CPUStartSecs = cpu0.Seconds()

	// Paced.
	sc.n = 0
	n := rate * secs
	paced := g.flows(2*g.batch, n)
	msgs := t.encode(g, paced)
	interval := time.Duration(float64(time.Second) * float64(g.batch) / float64(rate))
	start := time.Now()
	for i, m := range msgs {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		if err := t.send(ctx, [][]byte{m}); err != nil {
			return res, fmt.Errorf("paced send: %w", err)
		}
	}
	g.add(want, paced)
	if err := sc.waitFor(want, 120*time.Second, false); err != nil {
		return res, fmt.Errorf("paced: %w", err)
	}
	el := time.Since(start)
	cpu1, _ := cpuTime(pid)
	res.PacedScrapes = sc.n
	res.PacedFlows = n
	res.PacedRate = float64(n) / el.Seconds()

	// Max: unpaced.
	maxSet := g.flows(2*g.batch+n, maxFlows)
	msgs = t.encode(g, maxSet)
	g.add(want, maxSet)
	sc.n = 0
	start = time.Now()
	if err := t.send(ctx, msgs); err != nil {
		return res, fmt.Errorf("max send: %w", err)
	}
	if err := sc.waitFor(want, 300*time.Second, false); err != nil {
		return res, fmt.Errorf("max: %w", err)
	}
	el = time.Since(start)
	cpu2, _ := cpuTime(pid)
	res.MaxScrapes = sc.n
	res.MaxFlows = maxFlows
	res.MaxRate = float64(maxFlows) / el.Seconds()

	// What a scrape costs, and the idle process.
	time.Sleep(time.Second)
	c0, _ := cpuTime(pid)
	time.Sleep(2 * time.Second)
	c1, _ := cpuTime(pid)
	res.IdleCPUPct = 100 * (c1 - c0).Seconds() / 2
	const scrapes = 20
	for range scrapes {
		if _, err := sc.scrape(); err != nil {
			return res, err
		}
	}
	c2, _ := cpuTime(pid)
	perScrape := (c2 - c1).Seconds() / scrapes
	res.ScrapeCPUMs = perScrape * 1000
	res.PacedCPUNs = ((cpu1 - cpu0).Seconds() - perScrape*float64(res.PacedScrapes)) * 1e9 / float64(n)
	res.MaxCPUNs = ((cpu2 - cpu1).Seconds() - perScrape*float64(res.MaxScrapes)) * 1e9 / float64(maxFlows)
	res.MaxBusy = (cpu2 - cpu1).Seconds() / el.Seconds()
	res.PeakRSSMB, err = peakRSS(pid)
	if err != nil {
		return res, err
	}
	got, err := sc.scrape()
	if err != nil {
		return res, err
	}
	res.Series = got.series
	res.ExactPairs, res.WrongPairs = compare(want, got)
	return res, nil
}

// cpuTime is the process's user+system time (/proc/<pid>/stat, clock ticks
// of 10 ms).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// peakRSS is VmHWM, in MB.
func peakRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM")
}

// freePort asks the kernel for a free TCP port on loopback.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func summarize(all []result, names []string) {
	type fig struct {
		label string
		get   func(result) float64
		unit  string
	}
	figs := []fig{
		{"CPU per flow, paced", func(r result) float64 { return r.PacedCPUNs }, "ns"},
		{"CPU per flow, unpaced", func(r result) float64 { return r.MaxCPUNs }, "ns"},
		{"flows/s, unpaced", func(r result) float64 { return r.MaxRate }, "flows/s"},
		{"core busy, unpaced", func(r result) float64 { return 100 * r.MaxBusy }, "%"},
		{"capacity of one core (1/CPU per flow)", func(r result) float64 { return 1e9 / r.MaxCPUNs }, "flows/s"},
		{"peak RSS", func(r result) float64 { return r.PeakRSSMB }, "MB"},
		{"start-up to first flows counted", func(r result) float64 { return r.StartupSecs }, "s"},
		{"start-up CPU", func(r result) float64 { return r.CPUStartSecs }, "CPU s"},
		{"idle CPU", func(r result) float64 { return r.IdleCPUPct }, "% of a core"},
		{"CPU per scrape", func(r result) float64 { return r.ScrapeCPUMs }, "ms"},
	}
	fmt.Println("\nmedians (min..max) over runs; ratio: flowlens / flp, flowlens-nohist / flp:")
	for _, f := range figs {
		fmt.Printf("  %-32s", f.label)
		meds := map[string]float64{}
		for _, n := range names {
			var v []float64
			for _, r := range all {
				if r.Target == n {
					v = append(v, f.get(r))
				}
			}
			if len(v) == 0 {
				continue
			}
			sort.Float64s(v)
			meds[n] = median(v)
			fmt.Printf("  %s %.4g (%.4g..%.4g) %s", n, meds[n], v[0], v[len(v)-1], f.unit)
		}
		if b := meds["flp"]; b != 0 {
			for _, n := range names {
				if a, ok := meds[n]; ok && n != "flp" {
					fmt.Printf("  %s/flp %.3f", n, a/b)
				}
			}
		}
		fmt.Println()
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

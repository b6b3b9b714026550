// Command mem measures the agent's resident memory by origin (issue #33,
// item 3): a two-namespace lab (client — server over one veth pair, built
// with netlab and removed on exit), flowlens-collector on loopback as the
// gRPC sink (its output discarded), and for each round and each agent binary
// given (-agent a,b: interleaved, so an A/B shares the host's state) one
// agent run per workload: started, read 2 s after /readyz ("start": idle
// after start), then -duration of traffic, read again ("load"), stopped.
//
// Each reading is the agent's VmRSS, its VmHWM (peak), and /proc/pid/smaps
// summed by origin: the binary's file-backed pages (text, rodata, data),
// anonymous memory (the Go heap's arenas, goroutine stacks, the runtime's
// own structures, the binary's bss), BPF map mmaps (anon_inode:bpf-map)
// and the rest; and the Go runtime's view from the agent's /metrics (heap
// in use, stacks in use, runtime structures, OS threads), with its flow
// and loss counters (lost packets by reason, overflow ring, evicted and
// exported flows). An agent path may be a wrapper that execs the agent (one
// entering a memory cgroup): the binary is found through /proc/PID/exe.
//
// Workloads (client → server): idle (none), keepalive (-ka-conns HTTP
// keep-alive connections at -ka-rate requests/s in all), newconn (a TCP
// connection per request at -nc-rate/s), tcp (one stream paced at
// -tcp-mbps), udp (-udp-pps raw UDP frames/s from -udp-senders AF_PACKET
// sockets, cycling through -udp-flows flows, or with 0 each frame a new
// flow). Medians over the rounds, with min..max; JSON of every run in -out.
//
//	go build -o bin/mem ./hack/bench/mem
//	bin/mem -agent bin/flowlens-agent,bin/flowlens-agent+GOGC=50 -rounds 5
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

type options struct {
	agents              []string
	collector           string
	workloads           []string
	rounds              int
	duration            time.Duration
	env                 []string
	extra               []string
	kaConns, kaRate     int
	ncRate, tcpMbps     int
	udpPPS, udpFlows    int
	udpSenders          int
	out                 string
	drain               time.Duration
	period              string
	features, cacheSize string
}

func main() {
	var o options
	var agents, workloads, env, extra string
	flag.StringVar(&agents, "agent", "bin/flowlens-agent", "agent binaries, comma-separated (interleaved per round); path+K=V+K=V runs path with K=V in its environment")
	flag.StringVar(&o.collector, "collector", "bin/flowlens-collector", "collector binary (the gRPC sink)")
	flag.StringVar(&workloads, "workloads", "idle,keepalive,tcp,newconn,udp", "workloads")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "traffic per run")
	flag.StringVar(&env, "env", "", "extra environment of the agents, comma-separated K=V")
	flag.StringVar(&extra, "args", "", "extra agent arguments, space-separated")
	flag.IntVar(&o.kaConns, "ka-conns", 50, "keepalive: connections")
	flag.IntVar(&o.kaRate, "ka-rate", 5000, "keepalive: requests/s in all")
	flag.IntVar(&o.ncRate, "nc-rate", 1000, "newconn: connections/s")
	flag.IntVar(&o.tcpMbps, "tcp-mbps", 800, "tcp: stream pace, Mbit/s")
	flag.IntVar(&o.udpPPS, "udp-pps", 300000, "udp: datagrams/s")
	flag.IntVar(&o.udpFlows, "udp-flows", 50000, "udp: flows cycled through (0: every frame a new flow)")
	flag.IntVar(&o.udpSenders, "udp-senders", 2, "udp: sending sockets (goroutines), the rate shared")
	flag.StringVar(&o.period, "cache-active-timeout", "5s", "agent --cache-active-timeout")
	flag.StringVar(&o.features, "features", "none", "agent --features")
	flag.StringVar(&o.cacheSize, "cache-max-flows", "100000", "agent --cache-max-flows")
	flag.StringVar(&o.out, "out", "", "JSON of every run")
	flag.DurationVar(&o.drain, "drain", 0, "after the load reading, wait this long and read the counters and the peak again (0: not)")
	flag.Parse()
	o.agents = strings.Split(agents, ",")
	o.workloads = strings.Split(workloads, ",")
	if env != "" {
		o.env = strings.Split(env, ",")
	}
	o.extra = strings.Fields(extra)
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "mem:", err)
		os.Exit(1)
	}
}

// lab is the client and server namespaces and the servers in the server.
type lab struct {
	cli, srv *netlab.Netns
	stop     []func()
}

const (
	cliIP = "10.77.0.1"
	srvIP = "10.77.0.2"
)

func newLab(s *netlab.Script) (*lab, error) {
	l := &lab{}
	err := s.Build(func(t netlab.T) {
		l.cli = netlab.NewNetns(t, "memc")
		l.srv = netlab.NewNetns(t, "mems")
		netlab.Veth(t, l.cli, "flmc0", l.srv, "flms0")
		netlab.AddAddr(t, l.cli, "flmc0", cliIP+"/24")
		netlab.AddAddr(t, l.srv, "flms0", srvIP+"/24")
	})
	if err != nil {
		return nil, err
	}
	var ln, tln net.Listener
	if err := l.srv.Do(func() (err error) {
		if ln, err = net.Listen("tcp", srvIP+":8080"); err != nil {
			return err
		}
		tln, err = net.Listen("tcp", srvIP+":5201")
		return err
	}); err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })}
	go hs.Serve(ln)
	go func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	l.stop = append(l.stop, func() { hs.Close(); tln.Close() })
	return l, nil
}

func (l *lab) dial(ctx context.Context, network, addr string) (c net.Conn, err error) {
	err = l.cli.Do(func() error {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// paced calls fn n times a second (in ticks of 10 ms) until ctx ends.
func paced(ctx context.Context, n int, fn func()) {
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	start, done := time.Now(), 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		due := int(time.Since(start).Seconds() * float64(n))
		for ; done < due && ctx.Err() == nil; done++ {
			fn()
		}
	}
}

// traffic runs workload w until ctx ends; it returns what it did, for the report.
func (l *lab) traffic(ctx context.Context, o options, w string) (string, error) {
	switch w {
	case "idle":
		<-ctx.Done()
		return "", nil
	case "keepalive", "newconn":
		tr := &http.Transport{DialContext: l.dial, MaxIdleConnsPerHost: o.kaConns, DisableKeepAlives: w == "newconn"}
		defer tr.CloseIdleConnections()
		cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		workers, rate := o.kaConns, o.kaRate
		if w == "newconn" {
			workers, rate = 20, o.ncRate
		}
		jobs := make(chan struct{}, workers)
		var ok, fail int64
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range jobs {
					resp, err := cl.Get("http://" + srvIP + ":8080/")
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					mu.Lock()
					if err == nil {
						ok++
					} else {
						fail++
					}
					mu.Unlock()
				}
			})
		}
		paced(ctx, rate, func() {
			select {
			case jobs <- struct{}{}:
			case <-ctx.Done():
			}
		})
		close(jobs)
		wg.Wait()
		return fmt.Sprintf("%d requests (%d failed)", ok, fail), nil
	case "tcp":
		c, err := l.dial(ctx, "tcp", srvIP+":5201")
		if err != nil {
			return "", err
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		var sent int64
		paced(ctx, o.tcpMbps*1e6/8/len(buf), func() {
			n, _ := c.Write(buf)
			sent += int64(n)
		})
		return fmt.Sprintf("%d MB sent", sent>>20), nil
	case "udp":
		// Raw frames from AF_PACKET sockets (netlab.Flooder), through the
		// client device's qdisc and so its TC egress hook (where the agent
		// counts them), to a destination MAC the server drops at once:
		// one Go UDP socket reached ~120,000 datagrams/s here, these
		// senders the -udp-pps asked for.
		var cli *net.Interface
		if err := l.cli.Do(func() (err error) { cli, err = net.InterfaceByName("flmc0"); return err }); err != nil {
			return "", err
		}
		otherHost := net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x77, 0x77}
		var sent atomic.Uint64
		var wg sync.WaitGroup
		errs := make(chan error, o.udpSenders)
		for i := range o.udpSenders {
			// Each sender its own source address: disjoint flows.
			src := net.IPv4(10, 77, 0, byte(10+i))
			f, err := netlab.NewFlooder(l.cli, "flmc0", cli.HardwareAddr, otherHost, src, net.ParseIP(srvIP), false)
			if err != nil {
				return "", err
			}
			if o.udpFlows > 0 {
				f.Cycle = uint64(max(1, o.udpFlows/o.udpSenders))
			}
			wg.Go(func() {
				defer f.Close()
				d := time.Until(deadline(ctx))
				n, err := f.Flood(d, float64(o.udpPPS)/float64(o.udpSenders))
				sent.Add(n)
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return "", err
		}
		flows := "every frame a new flow"
		if o.udpFlows > 0 {
			flows = fmt.Sprintf("%d flows cycled", o.udpFlows)
		}
		return fmt.Sprintf("%d frames (%.0f/s, %d senders, %s)", sent.Load(), float64(sent.Load())/o.duration.Seconds(), o.udpSenders, flows), nil
	}
	return "", fmt.Errorf("unknown workload %q", w)
}

// deadline is ctx's deadline (now if it has none).
func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now()
}

// reading is the agent's memory at one moment, in MiB.
type reading struct {
	RSS, HWM                    float64
	BinText, BinRO, BinData     float64 // the binary's file-backed mappings: r-x, r--, rw-
	Anon, BPFMaps, Other        float64 // anonymous; anon_inode:bpf-map; the rest
	GoHeapInuse, GoStackInuse   float64 // runtime: heap spans in use, stack spans in use
	GoRuntimeSys, GoHeapRelease float64 // runtime: its own structures (mspan, mcache, gc, other sys); heap released to the OS
	GoHeapIdle                  float64 // heap idle, not yet released
	Threads                     float64
	// Counts is the agent's flow and loss counters (not MiB): the
	// flowlens_agent_ series of countLine, labels included.
	Counts map[string]float64 `json:",omitempty"`
}

func readMem(pid int, exe, metricsAddr string) (r reading, err error) {
	if p, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
		exe = p // the binary a wrapper (a cgroup's, an env's) executed
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return r, err
	}
	for line := range strings.Lines(string(st)) {
		f := strings.Fields(line)
		if len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "VmRSS:":
				r.RSS = kb / 1024
			case "VmHWM:":
				r.HWM = kb / 1024
			case "Threads:":
				r.Threads = kb
			}
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return r, err
	}
	defer f.Close()
	var cur *float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		if strings.Contains(fs[0], "-") && len(fs) >= 5 { // a mapping's header
			path := ""
			if len(fs) >= 6 {
				path = strings.Join(fs[5:], " ")
			}
			switch {
			case path == exe && strings.HasPrefix(fs[1], "r-x"):
				cur = &r.BinText
			case path == exe && strings.HasPrefix(fs[1], "rw"):
				cur = &r.BinData
			case path == exe:
				cur = &r.BinRO
			case strings.Contains(path, "bpf-map"):
				cur = &r.BPFMaps
			case path == "":
				cur = &r.Anon
			default:
				cur = &r.Other
			}
			continue
		}
		if fs[0] == "Rss:" && cur != nil {
			kb, _ := strconv.ParseFloat(fs[1], 64)
			*cur += kb / 1024
		}
	}
	if metricsAddr != "" {
		m := scrape(metricsAddr)
		r.GoHeapInuse = m["go_memstats_heap_inuse_bytes"] / (1 << 20)
		r.GoStackInuse = m["go_memstats_stack_inuse_bytes"] / (1 << 20)
		r.GoHeapRelease = m["go_memstats_heap_released_bytes"] / (1 << 20)
		r.GoHeapIdle = m["go_memstats_heap_idle_bytes"]/(1<<20) - r.GoHeapRelease
		r.GoRuntimeSys = (m["go_memstats_mspan_sys_bytes"] + m["go_memstats_mcache_sys_bytes"] + m["go_memstats_buck_hash_sys_bytes"] +
			m["go_memstats_gc_sys_bytes"] + m["go_memstats_other_sys_bytes"]) / (1 << 20)
		r.Counts = map[string]float64{}
		for k, v := range m {
			if strings.HasPrefix(k, "flowlens_agent_") {
				r.Counts[k] = v
			}
		}
	}
	return r, sc.Err()
}

var metricLine = regexp.MustCompile(`^(go_memstats_[a-z_]+|` + countLine + `) ([0-9.e+]+)$`)

// countLine is the agent's counters a reading keeps: where the flows went
// (the overflow ring, evicted, exported) and what was lost, by reason.
const countLine = `flowlens_agent_(?:lost_packets_total|overflow_lost_total|overflow_records_total|evicted_flows_total|export_flows_total|export_dropped_flows_total)(?:\{[^}]*\})?`

func scrape(addr string) map[string]float64 {
	m := map[string]float64{}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if s := metricLine.FindStringSubmatch(sc.Text()); s != nil {
			m[s[1]], _ = strconv.ParseFloat(s[2], 64)
		}
	}
	return m
}

type runResult struct {
	Agent, Workload string
	Round           int
	Start, Load     reading
	// Drained is read -drain after Load (zero without -drain): what the
	// traffic left in the maps, the overflow aggregation and the queues
	// exported or counted by then.
	Drained      reading
	StartS, CPUS float64 // s from exec to ready; the agent's CPU over its life
	Traffic      string
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func run(o options) error {
	s := &netlab.Script{}
	defer s.Close()
	l, err := newLab(s)
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range l.stop {
			f()
		}
	}()
	sink := fmt.Sprintf("127.0.0.1:%d", freePort())
	coll := exec.Command(o.collector, "--listen", sink, "--metrics-address", "", "--output", "none", "--auth", "none")
	coll.Stderr = os.Stderr
	if err := coll.Start(); err != nil {
		return err
	}
	defer func() { coll.Process.Kill(); coll.Wait() }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	var all []runResult
	for round := range o.rounds {
		for _, w := range o.workloads {
			for i := range o.agents {
				a := o.agents[(i+round)%len(o.agents)] // alternate who goes first
				r, err := runOnce(o, l, a, w, sink)
				if err != nil {
					return fmt.Errorf("%s %s round %d: %w", a, w, round, err)
				}
				r.Round = round
				all = append(all, r)
				fmt.Fprintf(os.Stderr, "round %d %-9s %-28s start %.1f MB, load rss %.1f hwm %.1f MB (text %.1f ro %.1f data %.1f anon %.1f bpf %.1f; heap %.1f stack %.1f threads %.0f) %s\n",
					round, w, a, r.Start.RSS, r.Load.RSS, r.Load.HWM, r.Load.BinText, r.Load.BinRO, r.Load.BinData, r.Load.Anon, r.Load.BPFMaps,
					r.Load.GoHeapInuse, r.Load.GoStackInuse, r.Load.Threads, r.Traffic)
				select {
				case <-sig:
					return errors.New("interrupted")
				default:
				}
			}
		}
	}
	report(o, all)
	if o.out != "" {
		b, _ := json.MarshalIndent(all, "", "  ")
		return os.WriteFile(o.out, b, 0o644)
	}
	return nil
}

func runOnce(o options, l *lab, agent, w, sink string) (runResult, error) {
	r := runResult{Agent: agent, Workload: w}
	path, agentEnv, _ := strings.Cut(agent, "+")
	exe, err := filepath.Abs(path)
	if err != nil {
		return r, err
	}
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort())
	args := append([]string{"--netns", l.cli.Name, "--interfaces", "flmc0", "--features", o.features,
		"--cache-active-timeout", o.period, "--cache-max-flows", o.cacheSize,
		"--export", "grpc", "--target", sink, "--metrics-address", metrics, "--log-level", "warn"}, o.extra...)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), o.env...)
	if agentEnv != "" {
		cmd.Env = append(cmd.Env, strings.Split(agentEnv, "+")...)
	}
	var stderr strings.Builder
	cmd.Stderr, cmd.Stdout = &stderr, io.Discard
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("not ready: %s", stderr.String())
		}
	}
	r.StartS = time.Since(t0).Seconds()
	time.Sleep(2 * time.Second)
	pid := cmd.Process.Pid
	if r.Start, err = readMem(pid, exe, metrics); err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.duration)
	r.Traffic, err = l.traffic(ctx, o, w)
	cancel()
	if err != nil {
		return r, err
	}
	if r.Load, err = readMem(pid, exe, metrics); err != nil {
		return r, err
	}
	if o.drain > 0 {
		time.Sleep(o.drain)
		if r.Drained, err = readMem(pid, exe, metrics); err != nil {
			return r, err
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.CPUS = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return r, nil
}

func med(v []float64) (m, lo, hi float64) {
	if len(v) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	slices.Sort(v)
	n := len(v)
	m = v[n/2]
	if n%2 == 0 {
		m = (v[n/2-1] + v[n/2]) / 2
	}
	return m, v[0], v[n-1]
}

func report(o options, all []runResult) {
	cols := []struct {
		name string
		f    func(r runResult) float64
	}{
		{"start RSS", func(r runResult) float64 { return r.Start.RSS }},
		{"peak RSS (HWM)", func(r runResult) float64 { return r.Load.HWM }},
		{"load RSS", func(r runResult) float64 { return r.Load.RSS }},
		{"  binary text (r-x)", func(r runResult) float64 { return r.Load.BinText }},
		{"  binary rodata (r--)", func(r runResult) float64 { return r.Load.BinRO }},
		{"  binary data (rw-)", func(r runResult) float64 { return r.Load.BinData }},
		{"  anonymous", func(r runResult) float64 { return r.Load.Anon }},
		{"  BPF map mmaps", func(r runResult) float64 { return r.Load.BPFMaps }},
		{"  other", func(r runResult) float64 { return r.Load.Other }},
		{"Go heap in use", func(r runResult) float64 { return r.Load.GoHeapInuse }},
		{"Go heap idle, kept", func(r runResult) float64 { return r.Load.GoHeapIdle }},
		{"Go stacks in use", func(r runResult) float64 { return r.Load.GoStackInuse }},
		{"Go runtime structures", func(r runResult) float64 { return r.Load.GoRuntimeSys }},
		{"OS threads", func(r runResult) float64 { return r.Load.Threads }},
		{"start to ready, s", func(r runResult) float64 { return r.StartS }},
		{"agent CPU, ms", func(r runResult) float64 { return r.CPUS * 1000 }},
	}
	fmt.Printf("agent memory, MiB (medians over %d rounds, min..max); env %v, args %v\n", o.rounds, o.env, o.extra)
	for _, w := range o.workloads {
		fmt.Printf("\n## %s\n| | %s |\n|---|%s\n", w, strings.Join(o.agents, " | "), strings.Repeat("---|", len(o.agents)))
		for _, c := range cols {
			fmt.Printf("| %s |", c.name)
			for _, a := range o.agents {
				var v []float64
				for _, r := range all {
					if r.Agent == a && r.Workload == w {
						v = append(v, c.f(r))
					}
				}
				m, lo, hi := med(v)
				fmt.Printf(" %.1f (%.1f..%.1f) |", m, lo, hi)
			}
			fmt.Println()
		}
		counts := map[string]bool{}
		for _, r := range all {
			for _, c := range []map[string]float64{r.Load.Counts, r.Drained.Counts} {
				for k, v := range c {
					if r.Workload == w && v > 0 {
						counts[k] = true
					}
				}
			}
		}
		for _, drained := range []bool{false, true} {
			if drained && o.drain <= 0 {
				break
			}
			if drained {
				fmt.Printf("| %s after the load: peak RSS (HWM) |", o.drain)
				for _, a := range o.agents {
					var v []float64
					for _, r := range all {
						if r.Agent == a && r.Workload == w {
							v = append(v, r.Drained.HWM)
						}
					}
					m, lo, hi := med(v)
					fmt.Printf(" %.1f (%.1f..%.1f) |", m, lo, hi)
				}
				fmt.Println()
			}
			for _, k := range slices.Sorted(maps.Keys(counts)) {
				name := strings.TrimPrefix(k, "flowlens_agent_")
				if drained {
					name = o.drain.String() + " after: " + name
				}
				fmt.Printf("| %s |", name)
				for _, a := range o.agents {
					var v []float64
					for _, r := range all {
						if r.Agent == a && r.Workload == w {
							c := r.Load.Counts
							if drained {
								c = r.Drained.Counts
							}
							v = append(v, c[k])
						}
					}
					m, lo, hi := med(v)
					fmt.Printf(" %.0f (%.0f..%.0f) |", m, lo, hi)
				}
				fmt.Println()
			}
		}
	}
}

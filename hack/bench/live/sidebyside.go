package main

// Side-by-side mode (-peer-agent): flowlens and NetObserv's agent on the
// same live traffic, one after the other, in the bridge lab (bridgelab.go).
// For each workload, R rounds; each round runs none, flowlens, NetObserv,
// none (NetObserv before flowlens in even rounds), so every agent figure
// has a none run on each side and the two none runs give the A/A noise band.
//
// Both agents attach to the two host-side veths only (tcx; 2 TC program
// runs per bridged packet), count every packet (sampling 1), evict every
// -cache-active-timeout into a map of -cache-max-flows, measure flows only
// (flowlens --features none; NetObserv without RTT, drops, DNS, network
// events, translation, IPsec), and export over gRPC to a sink on loopback
// that only sums what it receives (flowlens: this driver's -flowlens-sink;
// NetObserv: hack/bench/peer/sink, in the host namespace where NetObserv
// runs). NetObserv runs inside the host namespace under
// `setarch --uname-2.6` (-peer-setarch): on kernels that refuse its fentry
// program, its own kernel-version gate then leaves fentry out.
//
// Per agent run: the TC programs' run time (BPF_ENABLE_STATS, held by this
// driver) over the traffic window divided by the bridged packets (the tx
// packets of the client's and the server's veths: what crossed the bridge),
// each program's ns per run, all the agent's programs' ns per packet, agent
// CPU from traffic start to exit, peak RSS, the records, packets and bytes
// exported, and the exactness check: exported packets (and, for flowlens,
// bytes) against the bridged packets over the agent's whole life. NetObserv
// does not flush its map on exit: the driver waits for its first eviction
// after the traffic (at most -cache-active-timeout) before stopping it.

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/receiver"
)

type sbsOptions struct {
	peerBin, sinkBin string
	setarch          bool
	workloads        []string
	dur              time.Duration
	heyConc          int
	heyQKeep         int
	heyQNew          int
	udpFlows         int
	udpPPS           int
	keepLogs         bool
	offloads         bool
	features         string
	harnesses        []string // fixed, saturating
	harness          string   // the one running (forHarness)

	iperf *iperfServer

	// internal modes
	cycleUDP     string
	flowlensSink string
}

// sbsFlags registers the side-by-side flags on fs.
func sbsFlags(fs *flag.FlagSet) *sbsOptions {
	s := &sbsOptions{}
	fs.StringVar(&s.peerBin, "peer-agent", "", "NetObserv's agent binary: run the side-by-side (flowlens vs NetObserv, bridge lab) instead of the A/B/A rounds")
	fs.StringVar(&s.sinkBin, "peer-sink", "", "the gRPC sink NetObserv exports to (hack/bench/peer/sink)")
	fs.BoolVar(&s.setarch, "peer-setarch", true, "start NetObserv under setarch --uname-2.6 (its kernel gate then skips fentry, which newer kernels refuse)")
	fs.Func("workloads", "side-by-side workloads, comma list of keepalive, newconn, tcp, udp (default all four)", func(v string) error {
		s.workloads = nil
		for _, w := range strings.Split(v, ",") {
			if w = strings.TrimSpace(w); w == "" {
				continue
			}
			if _, ok := workloadTitles[w]; !ok {
				return fmt.Errorf("unknown workload %q (keepalive, newconn, tcp, udp)", w)
			}
			s.workloads = append(s.workloads, w)
		}
		return nil
	})
	s.workloads = []string{"keepalive", "newconn", "tcp", "udp"}
	fs.Func("harness", "side-by-side harnesses, comma list of fixed (the -sbs-* rates, offloads as -offloads says) and saturating (hey and the UDP sender unpaced, TSO/GSO/GRO on) (default both, in that order)", func(v string) error {
		s.harnesses = nil
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h == "" {
				continue
			}
			if h != harnessFixed && h != harnessSaturating {
				return fmt.Errorf("unknown harness %q (fixed, saturating)", h)
			}
			s.harnesses = append(s.harnesses, h)
		}
		return nil
	})
	s.harnesses = []string{harnessFixed, harnessSaturating}
	fs.DurationVar(&s.dur, "sbs-duration", 8*time.Second, "side-by-side: traffic per run (iperf3 rounds it down to whole seconds)")
	fs.IntVar(&s.heyConc, "sbs-hey-c", 50, "side-by-side: hey workers")
	fs.IntVar(&s.heyQKeep, "sbs-hey-q-keepalive", 100, "side-by-side: requests/s per hey worker, keep-alive (0: unpaced)")
	fs.IntVar(&s.heyQNew, "sbs-hey-q-newconn", 20, "side-by-side: requests/s per hey worker, a new connection per request (0: unpaced)")
	fs.IntVar(&s.udpFlows, "sbs-udp-flows", 50000, "side-by-side: UDP flows cycled through (one datagram each in turn)")
	fs.IntVar(&s.udpPPS, "sbs-udp-pps", 50000, "side-by-side: UDP datagrams per second (0: unpaced)")
	fs.BoolVar(&s.keepLogs, "sbs-keep-logs", false, "side-by-side: keep every agent run's log in -out (a run whose count is off always keeps it)")
	fs.BoolVar(&s.offloads, "offloads", false, "side-by-side, fixed harness: keep TSO/GSO/GRO on the lab veths (default off: one skb is one wire packet for both agents; the saturating harness always keeps them on)")
	fs.StringVar(&s.features, "flowlens-features", "none", "side-by-side: flowlens --features (none: flows only, like the NetObserv run)")
	fs.StringVar(&s.cycleUDP, "cycle-udp", "", "internal: send datagrams cycling through flows: addr:flows:pps:duration")
	fs.StringVar(&s.flowlensSink, "flowlens-sink", "", "internal: flowlens gRPC sink that sums what it receives: listen-addr,totals-file")
	return s
}

// internal runs an internal mode if one was asked for.
func (s *sbsOptions) internal() (bool, error) {
	switch {
	case s.cycleUDP != "":
		return true, cycleUDP(s.cycleUDP)
	case s.flowlensSink != "":
		addr, file, ok := strings.Cut(s.flowlensSink, ",")
		if !ok {
			return true, fmt.Errorf("bad -flowlens-sink %q: want addr,file", s.flowlensSink)
		}
		return true, runFlowlensSink(addr, file)
	}
	return false, nil
}

var workloadTitles = map[string]string{
	"keepalive": "HTTP keep-alive",
	"newconn":   "HTTP new connection per request",
	"tcp":       "one iperf3 TCP stream",
	"udp":       "UDP, %d flows cycled",
}

// The harnesses: the same workloads at fixed rates, or saturating.
const (
	harnessFixed      = "fixed"
	harnessSaturating = "saturating"
)

// forHarness is s with harness h's loads. fixed keeps the -sbs-* rates and
// -offloads; saturating is issue #33's: hey with no rate limit, the UDP
// sender as fast as it goes, TSO/GSO/GRO on (what a node runs with).
func (s sbsOptions) forHarness(h string) sbsOptions {
	s.harness = h
	if h == harnessSaturating {
		s.heyQKeep, s.heyQNew, s.udpPPS, s.offloads = 0, 0, 0, true
	}
	return s
}

func (s sbsOptions) title(w string) string {
	rate := func(q int) string {
		if q == 0 {
			return ", unpaced"
		}
		return fmt.Sprintf(" -q %d", q)
	}
	switch w {
	case "keepalive":
		return fmt.Sprintf("%s (hey -c %d%s)", workloadTitles[w], s.heyConc, rate(s.heyQKeep))
	case "newconn":
		return fmt.Sprintf("%s (hey -c %d -disable-keepalive%s)", workloadTitles[w], s.heyConc, rate(s.heyQNew))
	case "udp":
		pps := "unpaced"
		if s.udpPPS > 0 {
			pps = fmt.Sprintf("%d datagrams/s", s.udpPPS)
		}
		return fmt.Sprintf(workloadTitles[w]+" (%s)", s.udpFlows, pps)
	}
	return workloadTitles[w]
}

func clientUnit(w string) string {
	switch w {
	case "tcp":
		return "Gb/s"
	case "udp":
		return "datagrams/s sent"
	}
	return "req/s"
}

// ---- the sinks' totals (hack/bench/peer/sink writes the same fields) ----

type sinkTotals struct {
	Records   uint64  `json:"records"`
	Packets   uint64  `json:"packets"`
	Bytes     uint64  `json:"bytes"`
	Batches   uint64  `json:"batches"`
	DupList   uint64  `json:"dup_list_entries"`
	LastBatch float64 `json:"last_batch_unix"`
	Final     bool    `json:"final"`
}

func readTotals(path string) (sinkTotals, error) {
	var t sinkTotals
	b, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	return t, json.Unmarshal(b, &t)
}

func writeTotals(path string, t sinkTotals) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// runFlowlensSink receives flowlens' gRPC export (pkg/receiver) and only
// sums it, like hack/bench/peer/sink does for NetObserv.
func runFlowlensSink(addr, file string) error {
	var mu sync.Mutex
	var t sinkTotals
	changed := false
	srv, err := receiver.New(func(_ context.Context, b *receiver.Batch) error {
		var pkts, byts uint64
		for _, f := range b.Flows {
			pkts += f.GetPackets()
			byts += f.GetBytes()
		}
		mu.Lock()
		t.Records += uint64(len(b.Flows))
		t.Packets += pkts
		t.Bytes += byts
		t.Batches++
		t.LastBatch = float64(time.Now().UnixNano()) / 1e9
		changed = true
		mu.Unlock()
		return nil
	}, receiver.Options{MaxMessageBytes: 256 << 20})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if err := writeTotals(file, t); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	snapshot := func(final bool) sinkTotals {
		mu.Lock()
		defer mu.Unlock()
		changed = false
		c := t
		c.Final = final
		return c
	}
	for {
		select {
		case err := <-errc:
			return err
		case <-sigs:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			srv.Shutdown(ctx)
			cancel()
			return writeTotals(file, snapshot(true))
		case <-tick.C:
			mu.Lock()
			c := changed
			mu.Unlock()
			if c {
				if err := writeTotals(file, snapshot(false)); err != nil {
					return err
				}
			}
		}
	}
}

// cycleUDP sends datagrams at a fixed rate (pps 0: as fast as it can, for
// the duration), cycling through flows flows (datagram i belongs to flow
// i mod flows: source port 1024 + i mod flows, through a raw socket, to the
// server's UDP socket on sinkPort, which reads them). Prints "sent N" at
// the end.
func cycleUDP(spec string) error {
	parts := strings.Split(spec, ":")
	if len(parts) != 4 {
		return fmt.Errorf("bad -cycle-udp %q", spec)
	}
	dst := net.ParseIP(parts[0]).To4()
	flows, err1 := strconv.Atoi(parts[1])
	pps, err2 := strconv.Atoi(parts[2])
	d, err3 := time.ParseDuration(parts[3])
	if err := errors.Join(err1, err2, err3); err != nil || dst == nil || flows < 1 || flows > 65535-1024 || pps < 0 {
		return fmt.Errorf("bad -cycle-udp %q: %v", spec, err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_UDP)
	if err != nil {
		return fmt.Errorf("raw socket: %w", err)
	}
	defer syscall.Close(fd)
	to := &syscall.SockaddrInet4{Addr: [4]byte(dst)}
	pkt := make([]byte, 8+16)
	binary.BigEndian.PutUint16(pkt[2:], sinkPort)
	binary.BigEndian.PutUint16(pkt[4:], uint16(len(pkt)))
	n := int(float64(pps) * d.Seconds())
	if pps == 0 {
		n = math.MaxInt
	}
	start := time.Now()
	const burst = 50
	sent := 0
	for i := 0; i < n; i++ {
		if pps == 0 && i%burst == 0 && time.Since(start) >= d {
			break
		}
		binary.BigEndian.PutUint16(pkt[0:], uint16(1024+i%flows))
		if err := syscall.Sendto(fd, pkt, 0, to); err != nil {
			if errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.EAGAIN) {
				continue
			}
			return fmt.Errorf("send: %w", err)
		}
		sent++
		if pps > 0 && i%burst == burst-1 {
			if ahead := time.Duration(float64(i+1)/float64(pps)*float64(time.Second)) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	}
	fmt.Printf("sent %d in %.3f s\n", sent, time.Since(start).Seconds())
	return nil
}

// ---- workloads ----

type clientResult struct {
	Value  float64 // req/s, Gb/s, datagrams/s
	P99Ms  float64
	Errors int
}

func (s sbsOptions) runWorkload(o options, l *lab, w string, dur time.Duration) (clientResult, error) {
	switch w {
	case "keepalive", "newconn":
		oo := o
		oo.heyConc, oo.heyDur, oo.keepalive = s.heyConc, dur, w == "keepalive"
		oo.heyQPS = s.heyQNew
		if w == "keepalive" {
			oo.heyQPS = s.heyQKeep
		}
		r, err := oo.runHey(l)
		return clientResult{Value: r.RPS, P99Ms: r.P99, Errors: r.Errors}, err
	case "tcp":
		if err := s.iperf.ensure(); err != nil {
			return clientResult{}, err
		}
		oo := o
		oo.iperfDur = max(dur, time.Second)
		r, err := oo.runIperf(l, false)
		return clientResult{Value: r.Mbps / 1000}, err
	case "udp":
		self, _ := os.Executable()
		out, err := exec.Command("ip", "netns", "exec", l.cli, self, "-cycle-udp",
			fmt.Sprintf("%s:%d:%d:%s", srvAddr, s.udpFlows, s.udpPPS, dur)).CombinedOutput()
		if err != nil {
			return clientResult{}, fmt.Errorf("cycle-udp: %v: %s", err, bytes.TrimSpace(out))
		}
		var n int
		var secs float64
		if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "sent %d in %f s", &n, &secs); err != nil || secs <= 0 {
			return clientResult{}, fmt.Errorf("cycle-udp output %q", out)
		}
		return clientResult{Value: float64(n) / secs}, nil
	}
	return clientResult{}, fmt.Errorf("unknown workload %q", w)
}

// iperfServer is the lab's iperf3 server, restarted (with a warning) if it
// is found gone before a TCP run.
type iperfServer struct {
	l   *lab
	cmd *exec.Cmd
	out *testkit.SyncBuffer
}

func (i *iperfServer) start() error {
	i.out = &testkit.SyncBuffer{}
	i.cmd = exec.Command("ip", "netns", "exec", i.l.srv, "iperf3", "-s", "-p", "5201")
	i.cmd.Stdout, i.cmd.Stderr = i.out, i.out
	i.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := i.cmd.Start(); err != nil {
		return err
	}
	i.l.procs = append(i.l.procs, i.cmd)
	return nil
}

func (i *iperfServer) ensure() error {
	if running(i.cmd.Process.Pid) {
		return nil
	}
	err := i.cmd.Wait()
	fmt.Fprintf(os.Stderr, "warning: the iperf3 server had exited (%v): %s; restarting it\n", err, tail(i.out.String(), 5))
	if err := i.start(); err != nil {
		return err
	}
	time.Sleep(time.Second)
	return nil
}

// ---- agents ----

const (
	agentNone     = "none"
	agentFlowlens = "flowlens"
	agentPeer     = "netobserv"
	peerSinkPort  = 9910 // in the host namespace, which is fresh: always free
)

type sbsAgent struct {
	*agentRun
	kind   string
	totals string // the sink's totals file
}

func (s sbsOptions) startSbsAgent(o options, l *lab, kind string, idx int) (*sbsAgent, error) {
	for try := 1; ; try++ {
		a, err := s.startSbsAgentOnce(o, l, kind, idx)
		if err == nil || try == 3 || !strings.Contains(err.Error(), "address already in use") {
			return a, err
		}
		fmt.Fprintf(os.Stderr, "%s start: a port was taken meanwhile, retrying\n", kind)
	}
}

func (s sbsOptions) startSbsAgentOnce(o options, l *lab, kind string, idx int) (*sbsAgent, error) {
	a := &sbsAgent{agentRun: &agentRun{stderr: &testkit.SyncBuffer{}, collErr: &testkit.SyncBuffer{}}, kind: kind,
		totals: filepath.Join(o.out, fmt.Sprintf("sbs-totals-%s-%d.json", kind, idx))}
	os.Remove(a.totals)
	self, _ := os.Executable()
	var sinkAddr string
	switch kind {
	case agentFlowlens:
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		sinkAddr = fmt.Sprintf("127.0.0.1:%d", port)
		a.coll = exec.Command(self, "-flowlens-sink", sinkAddr+","+a.totals)
	case agentPeer:
		sinkAddr = fmt.Sprintf("127.0.0.1:%d", peerSinkPort)
		a.coll = exec.Command("ip", "netns", "exec", l.rtr, s.sinkBin, "-listen", sinkAddr, "-out", a.totals)
	}
	a.coll.Stdout, a.coll.Stderr = a.collErr, a.collErr
	if err := a.coll.Start(); err != nil {
		return nil, err
	}
	// The sink writes its (empty) totals once it listens.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(a.totals); err == nil {
			break
		}
		if time.Now().After(deadline) || !running(a.coll.Process.Pid) {
			a.stopCollector()
			return nil, fmt.Errorf("%s sink did not start: %s", kind, tail(a.collErr.String(), 10))
		}
	}
	switch kind {
	case agentFlowlens:
		mport, err := freePort()
		if err != nil {
			a.stopCollector()
			return nil, err
		}
		a.metrics = fmt.Sprintf("127.0.0.1:%d", mport)
		a.cmd = exec.Command(o.agentBin, "--netns", l.rtr, "--interfaces", hostIfRegex,
			"--cache-active-timeout", o.period.String(), "--cache-max-flows", strconv.Itoa(o.cacheFlows),
			"--sampling", "1", "--features", s.features, "--export", "grpc", "--target", sinkAddr,
			"--metrics-address", a.metrics, "--log-level", "info")
	case agentPeer:
		args := []string{"netns", "exec", l.rtr}
		if s.setarch {
			args = append(args, "setarch", "--uname-2.6")
		}
		a.cmd = exec.Command("ip", append(args, s.peerBin)...)
		a.cmd.Env = append(os.Environ(),
			"EXPORT=grpc", "TARGET_HOST=127.0.0.1", "TARGET_PORT="+strconv.Itoa(peerSinkPort),
			"INTERFACES="+strings.Join(hostIfs, ","), "SAMPLING=1",
			"CACHE_ACTIVE_TIMEOUT="+o.period.String(), "CACHE_MAX_FLOWS="+strconv.Itoa(o.cacheFlows),
			"TC_ATTACH_MODE=tcx", "AGENT_IP=127.0.0.1", "LOG_LEVEL=info", "METRICS_ENABLE=false",
			// Flows only, like flowlens --features none.
			"ENABLE_RTT=false", "ENABLE_PKT_DROPS=false", "ENABLE_DNS_TRACKING=false",
			"ENABLE_NETWORK_EVENTS_MONITORING=false", "ENABLE_PKT_TRANSLATION=false",
			"ENABLE_IPSEC_TRACKING=false", "ENABLE_PCA=false")
	}
	a.cmd.Stdout, a.cmd.Stderr = a.stderr, a.stderr
	if err := a.cmd.Start(); err != nil {
		a.stopCollector()
		return nil, err
	}
	a.pid = a.cmd.Process.Pid
	// Ready when the agent's own programs are attached at all four hooks.
	deadline := time.Now().Add(30 * time.Second)
	for {
		time.Sleep(200 * time.Millisecond)
		ids, err := progIDsOf(a.pid)
		if err == nil {
			hooks, err := tcxProgs(l.mid)
			if err != nil {
				a.stop()
				return nil, err
			}
			if ready(hooks, ids) {
				a.progIDs = ids
				break
			}
		}
		if time.Now().After(deadline) || !running(a.pid) {
			state := "still running"
			if _, err := a.stop(); err != nil {
				state = err.Error()
			}
			return nil, fmt.Errorf("%s agent did not attach at %s within 30 s (%s); its log:\n%s\nsink:\n%s",
				kind, strings.Join(hostIfs, ", "), state, tail(a.stderr.String(), 25), tail(a.collErr.String(), 5))
		}
	}
	time.Sleep(300 * time.Millisecond)
	// Programs loaded after the attach (none expected) are picked up too.
	if ids, err := progIDsOf(a.pid); err == nil {
		a.progIDs = ids
	}
	return a, nil
}

// running is alive, except for a child that exited and was not waited for
// yet (a zombie, which signal 0 still reaches).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// ready: each host-side veth hook has one of the agent's programs.
func ready(hooks map[hook][]ebpf.ProgramID, own []ebpf.ProgramID) bool {
	for _, dev := range hostIfs {
		for _, dir := range []string{"ingress", "egress"} {
			if !slices.ContainsFunc(hooks[hook{dev, dir}], func(id ebpf.ProgramID) bool { return slices.Contains(own, id) }) {
				return false
			}
		}
	}
	return true
}

// ---- one run ----

type sbsRun struct {
	Harness  string  `json:"harness"` // fixed, saturating
	Workload string  `json:"workload"`
	Round    int     `json:"round"`
	Agent    string  `json:"agent"` // none, flowlens, netobserv
	Slot     int     `json:"slot"`  // position in the round, 0..3
	Client   float64 `json:"client"`
	Unit     string  `json:"client_unit"`
	P99Ms    float64 `json:"p99_ms,omitempty"`
	Errors   int     `json:"client_errors,omitempty"`
	WindowS  float64 `json:"window_s"`
	// What crossed the bridge in the traffic window: skbs (the veths'
	// counters; with offloads on a GSO buffer is one), which each run both
	// agents' programs once, and their bytes.
	BridgedPackets uint64 `json:"bridged_packets"`
	BridgedBytes   uint64 `json:"bridged_bytes"`

	// Agent runs only.
	Hooks         map[string][]string `json:"hooks,omitempty"`    // hook -> the agent's programs there
	TCProgs       map[string]progStat `json:"tc_progs,omitempty"` // by name, traffic window
	Progs         map[string]progStat `json:"progs,omitempty"`    // all the agent's programs that ran
	TCNsPerPacket float64             `json:"tc_ns_per_packet,omitempty"`
	// The same split by hook: ingress (flowlens' counting hook), egress (its
	// listed hook); 0 if a program sat at both directions.
	IngressNsPerPacket float64 `json:"ingress_ns_per_packet,omitempty"`
	EgressNsPerPacket  float64 `json:"egress_ns_per_packet,omitempty"`
	TCRunsPerPacket    float64 `json:"tc_runs_per_packet,omitempty"`
	AllNsPerPacket     float64 `json:"all_ns_per_packet,omitempty"`
	AgentCPUS          float64 `json:"agent_cpu_s,omitempty"` // traffic start to exit
	MaxRSSMB           float64 `json:"max_rss_mb,omitempty"`
	Records            uint64  `json:"records,omitempty"`
	CPUPerRecordUS     float64 `json:"cpu_per_record_us,omitempty"`
	ExportedPackets    uint64  `json:"exported_packets,omitempty"`
	ExportedBytes      uint64  `json:"exported_bytes,omitempty"`
	LifePackets        uint64  `json:"life_bridged_packets,omitempty"` // bridged over the agent's life
	LifeBytes          uint64  `json:"life_bridged_bytes,omitempty"`
	// Wire packets over the agent's life (wirePackets): what flowlens counts.
	LifeWirePackets uint64 `json:"life_wire_packets,omitempty"`
	// Set when segments and skbs differ (offloads on, TCP): no kernel
	// counter has the wire bytes, so flowlens' bytes are not checked.
	BytesUnchecked bool `json:"bytes_unchecked,omitempty"`
	// Set when a veth dropped skbs of a TCP workload with offloads on: the
	// wire packets are unknown, flowlens' packets are not checked either.
	PacketsUnchecked bool   `json:"packets_unchecked,omitempty"`
	SenderDrops      uint64 `json:"sender_veth_drops,omitempty"` // over the agent's life
	// A count that is off: the agent's warnings and errors, to say why,
	// and its whole log, kept in this file (in -out).
	AgentWarnings []string `json:"agent_warnings,omitempty"`
	AgentLog      string   `json:"agent_log,omitempty"`
	// flowlens: the counts of its "exporter stopped" line, its last word on
	// what became of the flows it evicted (exported_flows, dropped_flows,
	// shutdown_lost_flows, failed_flows...): a loss it counted shows here.
	AgentExport map[string]uint64 `json:"agent_export,omitempty"`
	// flowlens: its counters of packets lost before the export (the flow
	// map and overflow ring full, a memory bound) and of failed reads,
	// scraped just before the stop, without the "flowlens_agent_" prefix;
	// with overflow_records_total, not a loss (those packets are exported
	// through the ring buffer) but the sign that the flow map filled.
	AgentKernelLost map[string]uint64 `json:"agent_kernel_lost,omitempty"`
	// The sink was killed before it wrote its final totals: the exported
	// counts may miss its last batches.
	SinkNotFinal   bool    `json:"sink_not_final,omitempty"`
	ExactPackets   bool    `json:"exact_packets"`
	ExactBytes     bool    `json:"exact_bytes"`
	DupListEntries uint64  `json:"dup_list_entries,omitempty"`
	DrainS         float64 `json:"drain_s,omitempty"` // wait for the last eviction (NetObserv)
	LeftAttached   int     `json:"left_attached,omitempty"`
}

func (s sbsOptions) runNone(o options, l *lab, w string, r *sbsRun) error {
	tx0, err := l.labTx()
	if err != nil {
		return err
	}
	start := time.Now()
	c, err := s.runWorkload(o, l, w, s.dur)
	if err != nil {
		return err
	}
	r.WindowS = time.Since(start).Seconds()
	time.Sleep(500 * time.Millisecond)
	tx1, err := l.labTx()
	if err != nil {
		return err
	}
	r.Client, r.P99Ms, r.Errors = c.Value, c.P99Ms, c.Errors
	r.BridgedPackets, r.BridgedBytes = tx1.Packets-tx0.Packets, tx1.Bytes-tx0.Bytes
	return nil
}

func (s sbsOptions) runAgent(o options, l *lab, w string, r *sbsRun, idx int) (err error) {
	life0, err := l.bridged()
	if err != nil {
		return err
	}
	a, err := s.startSbsAgent(o, l, r.Agent, idx)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			a.stop()
		}
		os.Remove(a.totals)
	}()
	hooks, err := tcxProgs(l.mid)
	if err != nil {
		return err
	}
	var tcIDs []ebpf.ProgramID
	r.Hooks = map[string][]string{}
	for h, ids := range hooks {
		for _, id := range ids {
			if !slices.Contains(a.progIDs, id) {
				continue // not this agent's
			}
			r.Hooks[h.String()] = append(r.Hooks[h.String()], progName(id))
			if !slices.Contains(tcIDs, id) {
				tcIDs = append(tcIDs, id)
			}
		}
	}
	tx0, err := l.labTx()
	if err != nil {
		return err
	}
	u0, s0, err := procCPU(a.pid)
	if err != nil {
		return err
	}
	p0, t0 := progStats(a.progIDs), progStats(tcIDs)
	start := time.Now()
	c, err := s.runWorkload(o, l, w, s.dur)
	if err != nil {
		return err
	}
	r.WindowS = time.Since(start).Seconds()
	trafficEnd := time.Now()
	time.Sleep(500 * time.Millisecond) // the last packets through the hooks
	p1, t1 := progStats(a.progIDs), progStats(tcIDs)
	tx1, err := l.labTx()
	if err != nil {
		return err
	}
	r.Client, r.P99Ms, r.Errors = c.Value, c.P99Ms, c.Errors
	r.BridgedPackets, r.BridgedBytes = tx1.Packets-tx0.Packets, tx1.Bytes-tx0.Bytes

	if r.Agent == agentPeer {
		// No flush at exit: wait for the first eviction after the traffic.
		want := tx1.Packets - life0.Packets // NetObserv counts skbs
		r.DrainS = waitEvicted(a.totals, want, trafficEnd, o.period).Seconds()
	}
	if r.Agent == agentFlowlens {
		// Its losses before the export, while it still serves metrics (the
		// traffic is over: nothing adds to them before the stop).
		if m, err := scrape(a.metrics); err == nil {
			r.AgentKernelLost = map[string]uint64{}
			for _, k := range kernelLossMetrics {
				r.AgentKernelLost[strings.TrimPrefix(k, "flowlens_agent_")] = uint64(m[k])
			}
		} else {
			fmt.Fprintf(os.Stderr, "warning: flowlens metrics: %v\n", err)
		}
	}
	u, err := a.stop()
	stopped = true
	if err != nil {
		return fmt.Errorf("%s agent exit: %v\n%s", r.Agent, err, tail(a.stderr.String(), 20))
	}
	life1, err := l.bridged()
	if err != nil {
		return err
	}
	tot, err := readTotals(a.totals)
	if err != nil {
		return fmt.Errorf("%s sink totals: %v\n%s", r.Agent, err, tail(a.collErr.String(), 10))
	}
	if !tot.Final {
		// Killed: its totals are its last snapshot (every 100 ms), which
		// may miss the last batches it applied.
		r.SinkNotFinal = true
		fmt.Fprintf(os.Stderr, "warning: %s sink did not write its final totals: %s\n", r.Agent, tail(a.collErr.String(), 5))
	}
	if after, err := tcxProgs(l.mid); err == nil {
		for _, ids := range after {
			for _, id := range ids {
				if slices.Contains(a.progIDs, id) {
					r.LeftAttached++
				}
			}
		}
	}

	r.AgentCPUS = u.UserS + u.SysS - u0 - s0
	r.MaxRSSMB = u.MaxRSSMB
	r.TCProgs, r.Progs = diffStats(t0, t1), diffStats(p0, p1)
	var tcNs, tcRuns, allNs uint64
	for _, st := range r.TCProgs {
		tcNs += st.RunNs
		tcRuns += st.RunCnt
	}
	for _, st := range r.Progs {
		allNs += st.RunNs
	}
	r.IngressNsPerPacket, r.EgressNsPerPacket = hookNs(r.TCProgs, r.Hooks, r.BridgedPackets)
	if r.BridgedPackets > 0 {
		r.TCNsPerPacket = float64(tcNs) / float64(r.BridgedPackets)
		r.TCRunsPerPacket = float64(tcRuns) / float64(r.BridgedPackets)
		r.AllNsPerPacket = float64(allNs) / float64(r.BridgedPackets)
	}
	r.Records, r.ExportedPackets, r.ExportedBytes, r.DupListEntries = tot.Records, tot.Packets, tot.Bytes, tot.DupList
	r.LifePackets, r.LifeBytes = life1.Packets-life0.Packets, life1.Bytes-life0.Bytes
	var wireOK bool
	r.LifeWirePackets, wireOK = wirePackets(life0, life1, s.offloads)
	r.SenderDrops = life1.Dropped - life0.Dropped
	r.ExactBytes = r.ExportedBytes == r.LifeBytes
	if r.Agent == agentFlowlens {
		// flowlens counts a GSO buffer as its segments (§7 of the docs).
		r.ExactPackets = r.ExportedPackets == r.LifeWirePackets && wireOK
		r.PacketsUnchecked = !wireOK
		r.BytesUnchecked = r.LifeWirePackets != r.LifePackets || !wireOK
	} else {
		r.ExactPackets = r.ExportedPackets == r.LifePackets
	}
	if r.Agent == agentFlowlens {
		r.AgentExport = exporterStopped(a.stderr.String(), "grpc")
	}
	if !r.ExactPackets || s.keepLogs {
		r.AgentWarnings = warnings(a.stderr.String(), 10)
		r.AgentLog = fmt.Sprintf("sbs-agent-%s-%s-r%d-%s.log", r.Harness, r.Workload, r.Round, r.Agent)
		if err := os.WriteFile(filepath.Join(o.out, r.AgentLog), []byte(a.stderr.String()), 0o644); err != nil {
			return err
		}
	}
	if r.Records > 0 {
		r.CPUPerRecordUS = r.AgentCPUS / float64(r.Records) * 1e6
	}
	return nil
}

// warnings are the last n lines of an agent's log at level warning or
// error (slog's text and JSON, NetObserv's logrus: WARN, ERROR, warning,
// error).
func warnings(log string, n int) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "level=warn") || strings.Contains(l, "level=error") ||
			strings.Contains(l, `"level":"warn`) || strings.Contains(l, `"level":"error`) {
			out = append(out, line)
		}
	}
	return out[max(0, len(out)-n):]
}

// kernelLossMetrics are flowlens' counts of packets lost before the export
// (docs/metrics-agent.md), of evictions whose read failed, and of packets
// that went through the overflow ring buffer (the flow map was full).
var kernelLossMetrics = []string{"flowlens_agent_overflow_lost_total", "flowlens_agent_lost_packets_total",
	"flowlens_agent_overflow_records_total", "flowlens_agent_eviction_read_failures_total"}

// exporterStopped reads the counts of flowlens' "exporter stopped" line
// for exporter (nil when the log has none: the agent did not get that far).
func exporterStopped(log, exporter string) map[string]uint64 {
	_, rest, ok := strings.Cut(log, `msg="exporter stopped" exporter=`+exporter+" ")
	if !ok {
		return nil
	}
	rest, _, _ = strings.Cut(rest, "\n")
	counts := map[string]uint64{}
	for _, kv := range strings.Fields(rest) {
		k, v, _ := strings.Cut(kv, "=")
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			counts[k] = n
		}
	}
	return counts
}

// countedLost is the flows flowlens said it lost (its "exporter stopped"
// counts): dropped for a full queue, still queued at shutdown, failed,
// rejected by the sink.
func countedLost(c map[string]uint64) uint64 {
	return c["dropped_flows"] + c["shutdown_lost_flows"] + c["failed_flows"] + c["rejected_flows"]
}

// handedToExporter is every flow flowlens' evictions gave its exporter's
// queue: exported, failed exports, dropped for a full queue, still queued
// at shutdown (they add up to it, exporter.Queue.Summary).
func handedToExporter(c map[string]uint64) uint64 {
	return c["exported_flows"] + c["failed_export_flows"] + c["dropped_flows"] + c["shutdown_lost_flows"]
}

// lossCounted says whether a flowlens run that exported fewer packets than
// crossed counted losses of its own: flows its exporter lost, or packets
// lost before the export (the overflow ring's records are not a loss). The
// counts are of flows and of packets, not of the missing packets: the
// verdict says a shortfall has counted losses beside it, not that they
// add up to it.
func lossCounted(r *sbsRun) bool {
	if r.Agent != agentFlowlens || r.ExactPackets || r.PacketsUnchecked || r.ExportedPackets > r.LifeWirePackets {
		return false
	}
	if countedLost(r.AgentExport) > 0 {
		return true
	}
	for k, n := range r.AgentKernelLost {
		if k != "overflow_records_total" && n > 0 {
			return true
		}
	}
	return false
}

// bridgedCount is what the lab's two senders put on the bridge so far:
// their veths' tx counters (skbs: with offloads on a GSO buffer is one;
// the skbs a veth dropped are not in them) and their TCP stacks' segments,
// OutSegs plus RetransSegs (OutSegs leaves out segments that only
// retransmit; both count a GSO buffer as the segments it becomes on the
// wire; resets and time-wait ACKs are in OutSegs).
type bridgedCount struct {
	ifStats
	TCPSegs uint64
}

func (l *lab) bridged() (bridgedCount, error) {
	tx, err := l.labTx()
	c := bridgedCount{ifStats: tx}
	if err != nil {
		return c, err
	}
	for _, ns := range []string{l.cli, l.srv} {
		out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").Output()
		if err != nil {
			return c, fmt.Errorf("snmp of %s: %v", ns, err)
		}
		for _, f := range []string{"OutSegs", "RetransSegs"} {
			n, err := snmpField(string(out), "Tcp", f)
			if err != nil {
				return c, fmt.Errorf("snmp of %s: %v", ns, err)
			}
			c.TCPSegs += n
		}
	}
	return c, nil
}

// snmpField reads one counter of /proc/net/snmp, where each protocol has
// a line of names and a line of values ("Tcp: ... OutSegs ..." then
// "Tcp: ... 1234 ...").
func snmpField(snmp, proto, field string) (uint64, error) {
	var names []string
	for _, line := range strings.Split(snmp, "\n") {
		rest, ok := strings.CutPrefix(line, proto+":")
		if !ok {
			continue
		}
		if names == nil {
			names = strings.Fields(rest)
			continue
		}
		vals := strings.Fields(rest)
		if i := slices.Index(names, field); i >= 0 && i < len(vals) {
			return strconv.ParseUint(vals[i], 10, 64)
		}
		break
	}
	return 0, fmt.Errorf("no %s %s in /proc/net/snmp", proto, field)
}

// wirePackets is what went on the wire between a and b. Offloads off, one
// skb is one packet. On, a TCP skb can be many segments, which only TCP's
// counters count; a workload of the lab carries TCP or UDP, never both
// (IPv6 off, static neighbours: nothing else crosses), so when TCP sent
// anything its segments are the wire packets, otherwise the skbs are (the
// UDP sender writes one datagram per send, which GSO leaves whole). A
// stray non-TCP packet in a TCP workload shows as a mismatch, never hides.
// TCP counts its segments before the veth: when a veth dropped skbs
// meanwhile, how many segments crossed is unknown (ok false).
func wirePackets(a, b bridgedCount, offloads bool) (n uint64, ok bool) {
	if offloads && b.TCPSegs > a.TCPSegs {
		return b.TCPSegs - a.TCPSegs, b.Dropped == a.Dropped
	}
	return b.Packets - a.Packets, true
}

// hookNs splits the TC programs' run time per bridged packet by direction:
// the programs at ingress hooks (flowlens' counting hook) and at egress
// ones (its listed hook). hooks maps "dev/dir" to program names; a program
// at both directions (or at none) cannot be split: 0, 0.
func hookNs(progs map[string]progStat, hooks map[string][]string, packets uint64) (ingress, egress float64) {
	dir := map[string]string{}
	for h, names := range hooks {
		_, d, _ := strings.Cut(h, "/")
		for _, n := range names {
			if old, ok := dir[n]; ok && old != d {
				d = "both"
			}
			dir[n] = d
		}
	}
	if packets == 0 {
		return 0, 0
	}
	var in, eg uint64
	for n, st := range progs {
		switch dir[n] {
		case "ingress":
			in += st.RunNs
		case "egress":
			eg += st.RunNs
		default:
			return 0, 0
		}
	}
	return float64(in) / float64(packets), float64(eg) / float64(packets)
}

// diffStats is p1 - p0 by program name, programs that ran only.
func diffStats(p0, p1 map[string]progStat) map[string]progStat {
	out := map[string]progStat{}
	for name, st := range p1 {
		d := progStat{st.RunNs - p0[name].RunNs, st.RunCnt - p0[name].RunCnt}
		if d.RunCnt > 0 {
			out[name] = d
		}
	}
	return out
}

// waitEvicted waits until the sink has exactly want packets and has been
// quiet for a second, or until an eviction that started after the traffic
// has had time to arrive (period + 1 s after its end, then quiet for a
// second), or 2·period + 5 s at most. It returns how long it waited.
func waitEvicted(path string, want uint64, trafficEnd time.Time, period time.Duration) time.Duration {
	start := time.Now()
	var last sinkTotals
	quietSince := time.Now()
	for time.Since(start) < 2*period+5*time.Second {
		t, err := readTotals(path)
		if err == nil && (t.Packets != last.Packets || t.Batches != last.Batches) {
			last, quietSince = t, time.Now()
		}
		quiet := time.Since(quietSince) >= time.Second
		if quiet && (last.Packets == want || time.Since(trafficEnd) >= period+time.Second) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

// ---- the run ----

func peerVersion(bin string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "unknown version"
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/netobserv/netobserv-ebpf-agent" {
			return d.Path + " " + d.Version
		}
	}
	return bi.Main.Path + " " + bi.Main.Version
}

func runSideBySide(o options, s sbsOptions) error {
	if s.sinkBin == "" {
		return errors.New("-peer-agent needs -peer-sink (hack/bench/peer/sink)")
	}
	for _, b := range []string{o.agentBin, s.peerBin, s.sinkBin} {
		if _, err := os.Stat(b); err != nil {
			return err
		}
	}
	if s.setarch {
		if _, err := exec.LookPath("setarch"); err != nil {
			return errors.New("setarch (util-linux) not found; or pass -peer-setarch=false")
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	flVersion := "unknown version"
	if out, err := exec.Command(o.agentBin, "--version").Output(); err == nil {
		flVersion = strings.TrimSpace(string(out))
	}
	nVersion := peerVersion(s.peerBin)
	fmt.Printf("flowlens bench-live side by side, harnesses %s: %d rounds per workload of none, flowlens, NetObserv, none (NetObserv first in even rounds)\n",
		strings.Join(s.harnesses, " then "), o.rounds)
	fmt.Printf("agents: %s (--features %s); %s (flows only%s)\n", flVersion, s.features, nVersion,
		map[bool]string{true: ", under setarch --uname-2.6", false: ""}[s.setarch])
	fmt.Printf("both: sampling 1, cache timeout %s, %d flows max, tcx on %s only, gRPC to a summing sink on loopback\n",
		o.period, o.cacheFlows, strings.Join(hostIfs, " and "))
	fmt.Printf("machine: %s\n", machine())

	var all []sbsRun
	var sums []workloadSummary
	harnesses := map[string]any{}
	for _, h := range s.harnesses {
		hs := s.forHarness(h)
		runs, err := hs.runHarness(o)
		if err != nil {
			return fmt.Errorf("%s harness: %w", h, err)
		}
		all = append(all, runs...)
		sums = append(sums, hs.report(o, runs)...)
		harnesses[h] = map[string]any{
			"hey_q_keepalive": hs.heyQKeep, "hey_q_newconn": hs.heyQNew, "udp_pps": hs.udpPPS, "offloads": hs.offloads,
		}
		// Written after each harness: a later failure keeps the earlier one.
		b, err := json.MarshalIndent(map[string]any{
			"machine": machine(),
			"agents":  map[string]string{"flowlens": flVersion, "netobserv": nVersion},
			"options": map[string]any{
				"rounds": o.rounds, "harnesses": s.harnesses, "workloads": s.workloads, "duration_s": s.dur.Seconds(),
				"hey_c": s.heyConc, "udp_flows": s.udpFlows, "flowlens_features": s.features,
				"cache_active_timeout_s": o.period.Seconds(), "cache_max_flows": o.cacheFlows, "setarch": s.setarch,
				"harness": harnesses, // 0: unpaced
			},
			"runs":    all,
			"summary": sums,
		}, "", "  ")
		if err != nil {
			return fmt.Errorf("results JSON: %w", err)
		}
		if err := os.WriteFile(filepath.Join(o.out, "live-sidebyside.json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runHarness runs s's workloads in a bridge lab of its own (the offloads
// are the lab's): R rounds each, after a warm-up.
func (s sbsOptions) runHarness(o options) ([]sbsRun, error) {
	l, done, err := openLab(func() (*lab, error) { return newBridgeLab(s.offloads) })
	if err != nil {
		return nil, err
	}
	defer done()
	iperf := &iperfServer{l: l}
	if err := iperf.start(); err != nil {
		return nil, err
	}
	s.iperf = iperf
	time.Sleep(time.Second)
	offloads := "off (TSO/GSO/GRO: one skb per wire packet)"
	if s.offloads {
		offloads = "on (TSO/GSO/GRO: a GSO buffer is one skb, one run of each program, and as many packets as its segments)"
	}
	fmt.Printf("\n## harness: %s\n\nlab: client and server namespaces bridged in a third (%s), IPv4, static neighbours, offloads %s; %s of traffic per run\n",
		s.harness, bridgeIf, offloads, s.dur)

	var all []sbsRun
	for _, w := range s.workloads {
		// Warm-up, not reported.
		if _, err := s.runWorkload(o, l, w, min(s.dur, 2*time.Second)); err != nil {
			return nil, fmt.Errorf("%s warm-up: %w", w, err)
		}
		for round := 1; round <= o.rounds; round++ {
			order := []string{agentNone, agentFlowlens, agentPeer, agentNone}
			if round%2 == 0 {
				order = []string{agentNone, agentPeer, agentFlowlens, agentNone}
			}
			for slot, kind := range order {
				r := sbsRun{Harness: s.harness, Workload: w, Round: round, Agent: kind, Slot: slot, Unit: clientUnit(w)}
				var err error
				if kind == agentNone {
					err = s.runNone(o, l, w, &r)
				} else {
					err = s.runAgent(o, l, w, &r, len(all))
				}
				if err != nil {
					return nil, fmt.Errorf("%s round %d %s: %w", w, round, kind, err)
				}
				all = append(all, r)
				fmt.Fprintf(os.Stderr, "%-10s %-9s round %d %-9s %10.2f %s, bridged %d packets", s.harness, w, round, kind, r.Client, r.Unit, r.BridgedPackets)
				if kind != agentNone {
					want := r.LifePackets // NetObserv counts skbs, flowlens wire packets
					if kind == agentFlowlens {
						want = r.LifeWirePackets
					}
					fmt.Fprintf(os.Stderr, ", TC %.0f ns/packet (in %.0f, out %.0f; %.2f runs/packet), exported %d/%d packets, %d records, CPU %.2f s, RSS %.0f MB",
						r.TCNsPerPacket, r.IngressNsPerPacket, r.EgressNsPerPacket, r.TCRunsPerPacket, r.ExportedPackets, want, r.Records, r.AgentCPUS, r.MaxRSSMB)
				}
				fmt.Fprintln(os.Stderr)
			}
		}
	}
	return all, nil
}

// ---- report ----

// spread is a median with its min and max over rounds.
type spread struct {
	Med float64 `json:"median"`
	Min float64 `json:"min"`
	Max float64 `json:"max"`
	N   int     `json:"n"`
}

// spreadOf ignores NaN and infinite values; no value left: N 0.
func spreadOf(v []float64) spread {
	v = slices.DeleteFunc(slices.Clone(v), func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) })
	if len(v) == 0 {
		return spread{}
	}
	return spread{med(v), slices.Min(v), slices.Max(v), len(v)}
}

// f formats a spread: "972 (950–990)"; one round: "972".
func (sp spread) f(prec int) string {
	if sp.N == 0 {
		return "-"
	}
	if sp.N == 1 || sp.Min == sp.Max {
		return num(sp.Med, prec)
	}
	return fmt.Sprintf("%s (%s–%s)", num(sp.Med, prec), num(sp.Min, prec), num(sp.Max, prec))
}

// num formats with thousands separators: 1,387.
func num(v float64, prec int) string {
	s := strconv.FormatFloat(v, 'f', prec, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := b.String()
	if neg {
		out = "-" + out
	}
	if frac != "" {
		out += "." + frac
	}
	return out
}

type roundSet struct {
	none1, fl, peer, none2 *sbsRun
}

// workloadSummary is what the tables print, kept in the JSON for plots.
type workloadSummary struct {
	Harness           string `json:"harness"`
	Workload          string `json:"workload"`
	Title             string `json:"title"`
	FlowlensNs        spread `json:"flowlens_tc_ns_per_packet"`
	PeerNs            spread `json:"netobserv_tc_ns_per_packet"`
	Ratio             spread `json:"ratio"` // per-round flowlens / NetObserv
	FlowlensInNs      spread `json:"flowlens_ingress_ns_per_packet"`
	PeerInNs          spread `json:"netobserv_ingress_ns_per_packet"`
	FlowlensEgNs      spread `json:"flowlens_egress_ns_per_packet"`
	PeerEgNs          spread `json:"netobserv_egress_ns_per_packet"`
	EgressRatio       spread `json:"egress_ratio"` // per-round, the listed hook against NetObserv's egress
	FlowlensAllNs     spread `json:"flowlens_all_ns_per_packet"`
	PeerAllNs         spread `json:"netobserv_all_ns_per_packet"`
	FlowlensCPUUS     spread `json:"flowlens_cpu_us_per_record"`
	PeerCPUUS         spread `json:"netobserv_cpu_us_per_record"`
	FlowlensRSSMB     spread `json:"flowlens_peak_rss_mb"`
	PeerRSSMB         spread `json:"netobserv_peak_rss_mb"`
	FlowlensExact     int    `json:"flowlens_exact_rounds"`                  // packets, and bytes where checked
	FlowlensUnchecked int    `json:"flowlens_unchecked_rounds,omitempty"`    // wire packets unknown (PacketsUnchecked)
	FlowlensCounted   int    `json:"flowlens_counted_loss_rounds,omitempty"` // short, with losses the agent counted (lossCounted)
	PeerExactPackets  int    `json:"netobserv_exact_packet_rounds"`
	PeerExactBytes    int    `json:"netobserv_exact_byte_rounds"`
	Rounds            int    `json:"rounds"`
	Client            spread `json:"client_none"`
	ClientAA          spread `json:"client_aa"` // none after / none before
	ClientFlowlens    spread `json:"client_flowlens_vs_none"`
	ClientPeer        spread `json:"client_netobserv_vs_none"`
	P99None           spread `json:"p99_ms_none,omitzero"`
	P99AA             spread `json:"p99_aa,omitzero"`
	P99Flowlens       spread `json:"p99_flowlens_vs_none,omitzero"`
	P99Peer           spread `json:"p99_netobserv_vs_none,omitzero"`
}

// roundSets groups one harness's runs by workload and round.
func roundSets(all []sbsRun) map[string][]roundSet {
	sets := map[string][]roundSet{}
	for i := range all {
		r := &all[i]
		rs := sets[r.Workload]
		for len(rs) < r.Round {
			rs = append(rs, roundSet{})
		}
		x := &rs[r.Round-1]
		switch {
		case r.Agent == agentFlowlens:
			x.fl = r
		case r.Agent == agentPeer:
			x.peer = r
		case x.none1 == nil:
			x.none1 = r
		default:
			x.none2 = r
		}
		sets[r.Workload] = rs
	}
	return sets
}

// summarize is one harness's table: per workload, medians (min–max) over
// its complete rounds; ratios are per round (the host's speed drifts
// between rounds more than the differences measured).
func (s sbsOptions) summarize(all []sbsRun) []workloadSummary {
	sets := roundSets(all)
	collect := func(rs []roundSet, f func(roundSet) (float64, bool)) spread {
		var v []float64
		for _, x := range rs {
			if x.none1 == nil || x.fl == nil || x.peer == nil || x.none2 == nil {
				continue
			}
			if y, ok := f(x); ok {
				v = append(v, y)
			}
		}
		return spreadOf(v)
	}
	vs := func(get func(*sbsRun) float64, agent func(roundSet) *sbsRun) func(roundSet) (float64, bool) {
		return func(x roundSet) (float64, bool) {
			base := (get(x.none1) + get(x.none2)) / 2
			return get(agent(x)) / base, base > 0
		}
	}
	// each is a figure of both agents' runs; positive only (0: not measured).
	each := func(rs []roundSet, get func(*sbsRun) float64) (fl, peer spread) {
		fl = collect(rs, func(x roundSet) (float64, bool) { return get(x.fl), get(x.fl) > 0 })
		peer = collect(rs, func(x roundSet) (float64, bool) { return get(x.peer), get(x.peer) > 0 })
		return fl, peer
	}
	ratio := func(rs []roundSet, get func(*sbsRun) float64) spread {
		return collect(rs, func(x roundSet) (float64, bool) {
			return get(x.fl) / get(x.peer), get(x.fl) > 0 && get(x.peer) > 0
		})
	}
	var sums []workloadSummary
	for _, w := range s.workloads {
		rs := sets[w]
		if len(rs) == 0 {
			continue
		}
		ws := workloadSummary{Harness: s.harness, Workload: w, Title: s.title(w), Rounds: len(rs)}
		tc := func(r *sbsRun) float64 { return r.TCNsPerPacket }
		in := func(r *sbsRun) float64 { return r.IngressNsPerPacket }
		eg := func(r *sbsRun) float64 { return r.EgressNsPerPacket }
		ws.FlowlensNs, ws.PeerNs = each(rs, tc)
		ws.Ratio = ratio(rs, tc)
		ws.FlowlensInNs, ws.PeerInNs = each(rs, in)
		ws.FlowlensEgNs, ws.PeerEgNs = each(rs, eg)
		ws.EgressRatio = ratio(rs, eg)
		ws.FlowlensAllNs, ws.PeerAllNs = each(rs, func(r *sbsRun) float64 { return r.AllNsPerPacket })
		ws.FlowlensCPUUS, ws.PeerCPUUS = each(rs, func(r *sbsRun) float64 { return r.CPUPerRecordUS })
		ws.FlowlensRSSMB, ws.PeerRSSMB = each(rs, func(r *sbsRun) float64 { return r.MaxRSSMB })
		for _, x := range rs {
			if x.fl != nil && x.fl.ExactPackets && (x.fl.ExactBytes || x.fl.BytesUnchecked) {
				ws.FlowlensExact++
			}
			if x.fl != nil && x.fl.PacketsUnchecked {
				ws.FlowlensUnchecked++
			}
			if x.fl != nil && lossCounted(x.fl) {
				ws.FlowlensCounted++
			}
			if x.peer != nil && x.peer.ExactPackets {
				ws.PeerExactPackets++
			}
			if x.peer != nil && x.peer.ExactBytes {
				ws.PeerExactBytes++
			}
		}
		client := func(r *sbsRun) float64 { return r.Client }
		ws.Client = collect(rs, func(x roundSet) (float64, bool) { return (x.none1.Client + x.none2.Client) / 2, true })
		ws.ClientAA = collect(rs, func(x roundSet) (float64, bool) { return x.none2.Client / x.none1.Client, x.none1.Client > 0 })
		ws.ClientFlowlens = collect(rs, vs(client, func(x roundSet) *sbsRun { return x.fl }))
		ws.ClientPeer = collect(rs, vs(client, func(x roundSet) *sbsRun { return x.peer }))
		if w == "keepalive" || w == "newconn" {
			p99 := func(r *sbsRun) float64 { return r.P99Ms }
			ws.P99None = collect(rs, func(x roundSet) (float64, bool) { return (x.none1.P99Ms + x.none2.P99Ms) / 2, true })
			ws.P99AA = collect(rs, func(x roundSet) (float64, bool) { return x.none2.P99Ms / x.none1.P99Ms, x.none1.P99Ms > 0 })
			ws.P99Flowlens = collect(rs, vs(p99, func(x roundSet) *sbsRun { return x.fl }))
			ws.P99Peer = collect(rs, vs(p99, func(x roundSet) *sbsRun { return x.peer }))
		}
		sums = append(sums, ws)
	}
	return sums
}

// pair formats "flowlens / NetObserv" of two spreads.
func pair(a, b spread, prec int) string { return a.f(prec) + " / " + b.f(prec) }

// report prints one harness's tables and returns its summary.
func (s sbsOptions) report(o options, all []sbsRun) []workloadSummary {
	sets := roundSets(all)
	sums := s.summarize(all)

	fmt.Println()
	fmt.Printf("%s harness: BPF cost on live traffic, TC programs' run time per bridged packet (skb; 2 program runs each), median (min–max) over %d rounds; ratios: median of the per-round flowlens / NetObserv; client: run with the agent / mean of the round's none runs, A/A: none after / none before\n\n", s.harness, o.rounds)
	fmt.Println("| workload | BPF ns per bridged packet: flowlens / NetObserv | ratio | counting hook (ingress) | listed hook (egress) | egress ratio | µs agent CPU per exported flow | peak RSS MB | client with agent / without: flowlens | NetObserv | A/A | exact runs: flowlens, NetObserv packets (bytes) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, ws := range sums {
		unchecked := ""
		if ws.FlowlensUnchecked > 0 {
			unchecked = fmt.Sprintf(" (%d unchecked)", ws.FlowlensUnchecked)
		}
		if ws.FlowlensCounted > 0 {
			unchecked += fmt.Sprintf(" (%d short, losses counted)", ws.FlowlensCounted)
		}
		fmt.Printf("| %s | %s | **%s** | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d%s, %d/%d (%d/%d) |\n", ws.Title,
			pair(ws.FlowlensNs, ws.PeerNs, 0), ws.Ratio.f(2), pair(ws.FlowlensInNs, ws.PeerInNs, 0),
			pair(ws.FlowlensEgNs, ws.PeerEgNs, 0), ws.EgressRatio.f(2), pair(ws.FlowlensCPUUS, ws.PeerCPUUS, 2),
			pair(ws.FlowlensRSSMB, ws.PeerRSSMB, 1), ws.ClientFlowlens.f(3), ws.ClientPeer.f(3), ws.ClientAA.f(3),
			ws.FlowlensExact, ws.Rounds, unchecked, ws.PeerExactPackets, ws.Rounds, ws.PeerExactBytes, ws.Rounds)
	}

	fmt.Println()
	fmt.Println("Per agent (medians over rounds): TC programs' ns per run, TC runs per bridged packet, all the agent's programs' ns per bridged packet, agent CPU (traffic start to exit), per exported record, peak RSS")
	fmt.Println()
	fmt.Println("| workload | agent | TC ns/run by program | runs/packet | all programs ns/packet | agent CPU s | µs CPU/record | records | peak RSS MB |")
	fmt.Println("|---|---|---|---:|---:|---:|---:|---:|---:|")
	for _, ws := range sums {
		for _, ag := range []string{agentFlowlens, agentPeer} {
			var runs []*sbsRun
			for _, x := range sets[ws.Workload] {
				if r := map[string]*sbsRun{agentFlowlens: x.fl, agentPeer: x.peer}[ag]; r != nil {
					runs = append(runs, r)
				}
			}
			col := func(f func(*sbsRun) float64) spread {
				var v []float64
				for _, r := range runs {
					v = append(v, f(r))
				}
				return spreadOf(v)
			}
			names := map[string]bool{}
			for _, r := range runs {
				for n := range r.TCProgs {
					names[n] = true
				}
			}
			var progs []string
			for _, n := range slices.Sorted(maps.Keys(names)) {
				sp := col(func(r *sbsRun) float64 {
					st := r.TCProgs[n]
					if st.RunCnt == 0 {
						return math.NaN()
					}
					return float64(st.RunNs) / float64(st.RunCnt)
				})
				progs = append(progs, fmt.Sprintf("%s %s", n, num(sp.Med, 0)))
			}
			fmt.Printf("| %s | %s | %s | %.2f | %s | %.3f | %.2f | %s | %.1f |\n", ws.Workload, ag, strings.Join(progs, ", "),
				col(func(r *sbsRun) float64 { return r.TCRunsPerPacket }).Med,
				col(func(r *sbsRun) float64 { return r.AllNsPerPacket }).f(0),
				col(func(r *sbsRun) float64 { return r.AgentCPUS }).Med,
				col(func(r *sbsRun) float64 { return r.CPUPerRecordUS }).Med,
				num(col(func(r *sbsRun) float64 { return float64(r.Records) }).Med, 0),
				col(func(r *sbsRun) float64 { return r.MaxRSSMB }).Med)
		}
	}

	fmt.Println()
	fmt.Println("Client side: none = mean of the round's two none runs; A/A = none after / none before (the noise band); agent = agent run / none, median (min–max) over rounds")
	fmt.Println()
	fmt.Println("| workload | figure | none | A/A (none/none) | flowlens / none | NetObserv / none |")
	fmt.Println("|---|---|---:|---:|---:|---:|")
	for _, ws := range sums {
		prec := 0
		if ws.Workload == "tcp" {
			prec = 2
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", ws.Workload, clientUnit(ws.Workload), ws.Client.f(prec),
			ws.ClientAA.f(3), ws.ClientFlowlens.f(3), ws.ClientPeer.f(3))
		if ws.P99None.N > 0 {
			fmt.Printf("| %s | p99 latency ms | %s | %s | %s | %s |\n", ws.Workload, ws.P99None.f(2),
				ws.P99AA.f(3), ws.P99Flowlens.f(3), ws.P99Peer.f(3))
		}
	}

	fmt.Println()
	fmt.Println("Exact-count check: exported packets (bytes) against what crossed the bridge during the agent's life: skbs (bytes) from the veths' counters, and for flowlens, which counts a GSO buffer as its segments, wire packets (TCP's OutSegs + RetransSegs when TCP sent; its bytes are then unchecked: no kernel counter has them)")
	for _, r := range all {
		if r.Agent == agentNone {
			continue
		}
		verdict := "EXACT"
		want := r.LifePackets
		if r.Agent == agentFlowlens {
			want = r.LifeWirePackets
		}
		switch {
		case r.PacketsUnchecked:
			verdict = fmt.Sprintf("UNCHECKED (the sender veths dropped %d skbs: the segments that crossed are unknown; %+d against TCP's count)",
				r.SenderDrops, int64(r.ExportedPackets)-int64(want))
		case lossCounted(&r):
			verdict = fmt.Sprintf("SHORT, LOSSES COUNTED (%+d packets; the agent's counts follow)", int64(r.ExportedPackets)-int64(want))
		case !r.ExactPackets:
			verdict = fmt.Sprintf("MISMATCH (%+d packets)", int64(r.ExportedPackets)-int64(want))
		case r.BytesUnchecked:
			verdict = "EXACT (packets; bytes unchecked)"
		case !r.ExactBytes && r.Agent == agentFlowlens:
			verdict = fmt.Sprintf("MISMATCH (bytes %+d)", int64(r.ExportedBytes)-int64(r.LifeBytes))
		case !r.ExactBytes:
			verdict = fmt.Sprintf("packets exact, bytes %+d", int64(r.ExportedBytes)-int64(r.LifeBytes))
		}
		extra := ""
		if r.Agent == agentPeer {
			extra = fmt.Sprintf(", waited %.1f s for its eviction, %d dup_list entries", r.DrainS, r.DupListEntries)
		}
		if r.SinkNotFinal {
			extra += ", the sink was killed before its final totals (the last 100 ms of batches may be missing)"
		}
		if r.LeftAttached > 0 {
			extra += fmt.Sprintf(", %d programs still attached after exit", r.LeftAttached)
		}
		if r.AgentExport != nil && (!r.ExactPackets || countedLost(r.AgentExport) > 0) {
			extra += fmt.Sprintf("; the agent counted %d flows lost (dropped for a full queue %d, at shutdown %d, failed %d, rejected %d) of %d handed to its exporter",
				countedLost(r.AgentExport), r.AgentExport["dropped_flows"], r.AgentExport["shutdown_lost_flows"],
				r.AgentExport["failed_flows"], r.AgentExport["rejected_flows"], handedToExporter(r.AgentExport))
		}
		for _, k := range slices.Sorted(maps.Keys(r.AgentKernelLost)) {
			if n := r.AgentKernelLost[k]; n > 0 {
				extra += fmt.Sprintf(", %s %d", k, n)
			}
		}
		if !r.ExactPackets {
			extra += fmt.Sprintf("; its log: %s; the agent's last warnings and errors (%d):", r.AgentLog, len(r.AgentWarnings))
			for _, w := range r.AgentWarnings {
				extra += "\n      " + w
			}
		}
		if r.Errors > 0 {
			extra += fmt.Sprintf(", %d client errors", r.Errors)
		}
		fmt.Printf("  %-9s round %d %-9s exported %d packets / %d bytes in %d records, bridged %d skbs (%d wire packets) / %d bytes: %s%s\n",
			r.Workload, r.Round, r.Agent, r.ExportedPackets, r.ExportedBytes, r.Records, r.LifePackets, r.LifeWirePackets, r.LifeBytes, verdict, extra)
	}
	fmt.Println()
	fmt.Println("Hooks (first run of each agent):")
	seen := map[string]bool{}
	for _, r := range all {
		if r.Agent == agentNone || seen[r.Agent] {
			continue
		}
		seen[r.Agent] = true
		var hs []string
		for _, h := range slices.Sorted(maps.Keys(r.Hooks)) {
			hs = append(hs, h+": "+strings.Join(r.Hooks[h], " "))
		}
		fmt.Printf("  %-9s %s\n", r.Agent, strings.Join(hs, ", "))
	}
	return sums
}

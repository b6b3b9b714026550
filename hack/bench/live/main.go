// Command live is the live overhead benchmark (make bench-live, via
// hack/bench/live.sh): a three-namespace lab (client — router — server, all
// created here and removed on exit), an HTTP server and an iperf3 server in
// the server namespace, hey and iperf3 clients in the client namespace at a
// fixed offered load. Each round runs A (no agent), B (the agent, all
// features on, sampling 1, exporting over gRPC to flowlens-collector on
// loopback, or JSON to a file when the agent has no gRPC exporter) and A
// again, so every A/B ratio is printed beside an A/A ratio: the noise band.
//
// It reports requests/s and latency percentiles, iperf3 throughput, the
// agent's CPU (user+system) and peak RSS, the kernel time per program run
// from BPF program stats (BPF_ENABLE_STATS held for the whole run), flows
// per second, agent CPU per exported flow, and the exact-count check: the
// packets in the exported flows against the lab interfaces' counters.
//
// Then the scale run (-scale-flows new UDP flows per eviction period, for
// two periods): the agent's CPU per delivered flow and its peak RSS, once
// per export of -scale-exports (grpc, stdout, kafka-batch, kafka-flow: to
// a local Kafka broker the driver starts, kafka.go) in each of
// -scale-rounds rounds, then per export the medians with min..max
// (scale.go).
//
// With -peer-agent (make bench-live PEER=1) it runs the side-by-side
// instead (sidebyside.go, bridgelab.go): flowlens and NetObserv's agent
// (hack/bench/peer, pinned) on the same live traffic in a bridge lab (client
// and server namespaces bridged in a third; both agents on the two host-side
// veths only), per harness (fixed rates, or saturating: unpaced, offloads
// on) and workload -rounds rounds of none, flowlens,
// NetObserv, none (NetObserv first in even rounds), and prints the BPF ns per
// bridged packet of each with its spread, the per-round ratio, the per-agent
// detail, the exact-count check of both and the client-side ratios beside
// the none/none A/A band; JSON in -out/live-sidebyside.json. Its flags:
//
//	-peer-agent PATH        NetObserv's agent (enables the mode)
//	-peer-sink PATH         hack/bench/peer/sink, the gRPC sink NetObserv exports to
//	-peer-setarch           start NetObserv under setarch --uname-2.6 (default true)
//	-harness LIST           fixed,saturating (default both): the rates below with
//	                        -offloads, or hey and UDP unpaced with offloads on
//	-workloads LIST         keepalive,newconn,tcp,udp (default all four)
//	-sbs-duration D         traffic per run (default 8s)
//	-sbs-hey-c N            hey workers (default 50)
//	-sbs-hey-q-keepalive N  requests/s per worker, keep-alive (default 100; 0 unpaced)
//	-sbs-hey-q-newconn N    requests/s per worker, new connection each (default 20)
//	-sbs-udp-flows N        UDP flows cycled through (default 50000)
//	-sbs-udp-pps N          UDP datagrams per second (default 50000; 0 unpaced)
//	-offloads               fixed harness: keep TSO/GSO/GRO on the lab veths (default off)
//	-flowlens-features F    flowlens --features (default none: flows only)
//
// and -rounds, -agent, -out, -cache-active-timeout, -cache-max-flows from
// above, for both agents.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
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
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

type options struct {
	tls          bool // gRPC over TLS (-tls)
	rounds       int
	heyDur       time.Duration
	heyConc      int
	heyQPS       int // per worker
	keepalive    bool
	udpRate      string
	udpLen       int
	iperfDur     time.Duration
	tcp          bool
	agentBin     string
	collBin      string
	export       string // grpc or stdout; in a scale run, one of -scale-exports
	out          string
	cacheFlows   int
	period       time.Duration
	scaleFlows   int
	scaleSink    string
	scaleExports string
	scaleRounds  int
	scalePerf    bool
	kafka        *kafkaLab // the broker of the kafka-* scale runs
	exportBuffer int
	goMemLimit   string
}

func main() {
	var o options
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of A, B, A")
	flag.DurationVar(&o.heyDur, "hey-duration", 8*time.Second, "hey run length")
	flag.IntVar(&o.heyConc, "hey-c", 10, "hey workers")
	flag.IntVar(&o.heyQPS, "hey-q", 100, "requests per second per hey worker (fixed offered load = c·q)")
	flag.BoolVar(&o.keepalive, "keepalive", false, "reuse connections (default: a new TCP connection, two new flows, per request)")
	flag.StringVar(&o.udpRate, "udp-rate", "50M", "iperf3 UDP fixed rate (-b)")
	flag.IntVar(&o.udpLen, "udp-len", 1000, "iperf3 UDP datagram size (-l)")
	flag.DurationVar(&o.iperfDur, "iperf-duration", 5*time.Second, "length of each iperf3 run")
	flag.BoolVar(&o.tcp, "tcp", true, "also run an unpaced iperf3 TCP stream (throughput ratio; noisy)")
	flag.StringVar(&o.agentBin, "agent", "bin/flowlens-agent", "agent binary")
	flag.StringVar(&o.collBin, "collector", "", "collector binary (empty: export JSON to a file instead of gRPC)")
	flag.BoolVar(&o.tls, "tls", false, "export over TLS to the -collector (a CA and certificate made for the run), as the operator's secure default does")
	flag.StringVar(&o.out, "out", "bin/bench", "results directory")
	flag.IntVar(&o.cacheFlows, "cache-max-flows", 100000, "agent --cache-max-flows")
	flag.DurationVar(&o.period, "cache-active-timeout", 5*time.Second, "agent --cache-active-timeout")
	flag.StringVar(&o.goMemLimit, "gomemlimit", "", "GOMEMLIMIT for the agent in the scale run (e.g. 40MiB; empty: unset)")
	flag.IntVar(&o.exportBuffer, "export-buffer", 0, "agent --export-buffer (0: the agent's default)")
	flag.IntVar(&o.scaleFlows, "scale-flows", 100000, "flows per eviction period in the scale run (agent RSS and CPU per flow at that size; 0: skip)")
	flag.StringVar(&o.scaleSink, "scale-sink", "socket", "where the scale run's datagrams go: socket (flows differ by source port, all to one UDP socket of the server: delivered) or closed-ports (flows differ by destination port, all closed: a port scan, every flow is also a NO_SOCKET drop and so carries an enrichment entry)")
	flag.StringVar(&o.scaleExports, "scale-exports", "", "the scale run's exports, comma-separated, each run in turn: grpc (to the -collector), stdout, kafka-batch, kafka-flow (to a local broker the driver starts: --kafka-message batch or flow) (default: grpc with -collector, else stdout)")
	flag.IntVar(&o.scaleRounds, "scale-rounds", 1, "rounds of the scale run, each over every -scale-exports")
	flag.BoolVar(&o.scalePerf, "scale-perf", false, "profile the agent in each scale run with perf record (call graphs, 999 Hz) into -out/perf-<export>-<pid>.data; the sampling costs the agent CPU: not for measured runs")
	selfServe := flag.String("serve-http", "", "internal: serve HTTP on this address (run inside the server namespace)")
	spray := flag.String("spray", "", "internal: send N new UDP flows: addr,...:N:duration:sink")
	serveUDPAddr := flag.String("serve-udp", "", "internal: read and discard UDP datagrams on this address (run inside the server namespace)")
	sbs := sbsFlags(flag.CommandLine)
	flag.Parse()
	if ok, err := sbs.internal(); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if *selfServe != "" {
		serveHTTP(*selfServe)
		return
	}
	if *serveUDPAddr != "" {
		serveUDP(*serveUDPAddr)
		return
	}
	if *spray != "" {
		if err := sprayUDP(*spray); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	o.export = "stdout"
	if o.collBin != "" {
		o.export = "grpc"
	}
	if sbs.peerBin != "" {
		if err := runSideBySide(o, *sbs); err != nil {
			fmt.Fprintf(os.Stderr, "bench-live side by side: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "bench-live: %v\n", err)
		os.Exit(1)
	}
}

// serveHTTP answers every request with 1 KiB.
func serveHTTP(addr string) {
	body := bytes.Repeat([]byte("x"), 1024)
	srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	}), ReadHeaderTimeout: 5 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// sprayUDP sends n 16-byte datagrams, evenly over the duration, each a new
// flow. Sink "closed-ports": to n (address, port) pairs of the server, no
// socket behind them (the server answers with ICMP port unreachable, a
// handful of ICMP flows, and drops each datagram: drop enrichment too).
// Sink "socket": from n source ports, through a raw socket, to the server's
// UDP socket on sinkPort, which reads them: delivered, nothing dropped.
func sprayUDP(spec string) error {
	parts := strings.Split(spec, ":")
	if len(parts) != 4 {
		return fmt.Errorf("bad -spray %q", spec)
	}
	addrs := strings.Split(parts[0], ",")
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(parts[2])
	if err != nil {
		return err
	}
	// Flow i goes to address i%len(addrs) with port base + i/len(addrs).
	portOf := func(i, base int) (int, error) {
		port := base + i/len(addrs)
		if port > 65535 {
			return 0, fmt.Errorf("%d flows need more than %d addresses", n, len(addrs))
		}
		return port, nil
	}
	var send func(i int) error
	switch parts[3] {
	case "socket":
		// A raw IPPROTO_UDP socket writes the UDP header itself, so each
		// datagram has its own source port (the kernel adds the IPv4
		// header; a zero UDP checksum means none, valid on IPv4).
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_UDP)
		if err != nil {
			return fmt.Errorf("raw socket: %w", err)
		}
		defer syscall.Close(fd)
		dsts := make([]syscall.SockaddrInet4, len(addrs))
		for i, a := range addrs {
			dsts[i].Addr = [4]byte(net.ParseIP(a).To4())
		}
		pkt := make([]byte, 8+16)
		binary.BigEndian.PutUint16(pkt[2:], sinkPort)
		binary.BigEndian.PutUint16(pkt[4:], uint16(len(pkt)))
		send = func(i int) error {
			port, err := portOf(i, 1024)
			if err != nil {
				return err
			}
			binary.BigEndian.PutUint16(pkt[0:], uint16(port))
			return syscall.Sendto(fd, pkt, 0, &dsts[i%len(dsts)])
		}
	case "closed-ports":
		conn, err := net.ListenUDP("udp4", nil)
		if err != nil {
			return err
		}
		defer conn.Close()
		payload := make([]byte, 16)
		send = func(i int) error {
			port, err := portOf(i, 1)
			if err != nil {
				return err
			}
			conn.WriteToUDP(payload, &net.UDPAddr{IP: net.ParseIP(addrs[i%len(addrs)]), Port: port})
			return nil // ICMP errors from earlier datagrams may surface here: not ours to count
		}
	default:
		return fmt.Errorf("bad -spray sink %q", parts[3])
	}
	start := time.Now()
	const burst = 100
	for i := 0; i < n; i++ {
		if err := send(i); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		if i%burst == burst-1 {
			if ahead := time.Duration(float64(d)*float64(i+1)/float64(n)) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	}
	return nil
}

// serveUDP reads and discards datagrams (the scale run's "socket" sink).
func serveUDP(addr string) {
	conn, err := net.ListenPacket("udp4", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	conn.(*net.UDPConn).SetReadBuffer(16 << 20) // a burst must not overflow it
	buf := make([]byte, 2048)
	for {
		if _, _, err := conn.ReadFrom(buf); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// ---- the lab ----

const (
	cliIf, rtrCliIf, rtrSrvIf, srvIf = "flbc0", "flbr1", "flbr2", "flbs0"
	cliAddr, rtrCliAddr              = "10.201.1.2", "10.201.1.1"
	srvAddr, rtrSrvAddr              = "10.201.2.2", "10.201.2.1"
	sinkPort                         = 9999 // scale run, -scale-sink socket
)

type lab struct {
	cli, rtr, srv string         // namespace names (under /var/run/netns)
	cliNS, mid    *netlab.Netns  // the client's, the router's (or the bridge lab's host)
	srvNS         *netlab.Netns  // and the server's namespaces
	script        *netlab.Script // what built them; close tears it down
	procs         []*exec.Cmd
	atClose       []func() // run by close first (the Kafka broker)
}

func sh(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func nsdo(ns string, args ...string) error {
	return sh(append([]string{"ip", "netns", "exec", ns}, args...)...)
}

// newLab builds the router lab with netlab (internal/testkit/netlab), the
// builder the kernel tests use: three namespaces with IPv6 off (no packet
// but the traffic under test), the client and the server each joined by a
// veth to the router, static neighbours (no ARP on the wire), and the
// server's extra addresses (scale run).
func newLab() (*lab, error) {
	l := &lab{script: &netlab.Script{}}
	err := l.script.Build(func(t netlab.T) {
		cli, rtr, srv := l.namespaces(t, "rtr")
		cliL, rtrCliL := netlab.Veth(t, cli, cliIf, rtr, rtrCliIf)
		srvL, rtrSrvL := netlab.Veth(t, srv, srvIf, rtr, rtrSrvIf)
		netlab.AddAddr(t, cli, cliIf, cliAddr+"/24")
		netlab.AddAddr(t, rtr, rtrCliIf, rtrCliAddr+"/24")
		netlab.AddAddr(t, rtr, rtrSrvIf, rtrSrvAddr+"/24")
		for _, a := range append([]string{srvAddr}, srvExtraAddrs...) {
			netlab.AddAddr(t, srv, srvIf, a+"/24")
		}
		netlab.Route(t, cli, "0.0.0.0/0", rtrCliAddr, cliIf)
		netlab.Route(t, srv, "0.0.0.0/0", rtrSrvAddr, srvIf)
		sysctl(t, rtr, "net.ipv4.ip_forward", "1")
		netlab.Neigh(t, cli, cliIf, rtrCliAddr, rtrCliL.Attrs().HardwareAddr)
		netlab.Neigh(t, rtr, rtrCliIf, cliAddr, cliL.Attrs().HardwareAddr)
		netlab.Neigh(t, srv, srvIf, rtrSrvAddr, rtrSrvL.Attrs().HardwareAddr)
		for _, a := range append([]string{srvAddr}, srvExtraAddrs...) {
			netlab.Neigh(t, rtr, rtrSrvIf, a, srvL.Attrs().HardwareAddr)
		}
	})
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// srvExtraAddrs are the server's addresses besides srvAddr (scale run).
var srvExtraAddrs = []string{"10.201.2.3", "10.201.2.4", "10.201.2.5"}

// namespaces creates the client, middle (router or host) and server
// namespaces, IPv6 off, and tunes the client for many short connections
// from one address.
func (l *lab) namespaces(t netlab.T, middle string) (cli, mid, srv *netlab.Netns) {
	cli, mid, srv = netlab.NewNetns(t, "bench-cli"), netlab.NewNetns(t, "bench-"+middle), netlab.NewNetns(t, "bench-srv")
	for _, ns := range []*netlab.Netns{cli, mid, srv} {
		netlab.Quiet(t, ns)
	}
	l.cli, l.rtr, l.srv = cli.Name, mid.Name, srv.Name
	l.cliNS, l.mid, l.srvNS = cli, mid, srv
	sysctl(t, cli, "net.ipv4.tcp_tw_reuse", "1")
	sysctl(t, cli, "net.ipv4.ip_local_port_range", "10000 65000")
	return cli, mid, srv
}

func sysctl(t netlab.T, ns *netlab.Netns, key, value string) {
	if err := netlab.Sysctl(ns, key, value); err != nil {
		t.Fatalf("sysctl %s=%s in %s: %v", key, value, ns, err)
	}
}

func (l *lab) start(ns string, args ...string) error {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	l.procs = append(l.procs, cmd)
	return nil
}

func (l *lab) close() {
	for _, f := range l.atClose {
		f()
	}
	l.atClose = nil
	for _, p := range l.procs {
		if p.Process != nil {
			syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
			p.Wait()
		}
	}
	l.procs = nil
	if l.script != nil {
		if err := l.script.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "lab teardown:", err)
		}
	}
}

// ifStats are a device's tx counters; Dropped: the skbs it failed to hand
// over (a veth: its peer's backlog was full).
type ifStats struct{ Packets, Bytes, Dropped uint64 }

func txStats(ns, dev string) (ifStats, error) {
	out, err := exec.Command("ip", "-n", ns, "-j", "-s", "link", "show", "dev", dev).Output()
	if err != nil {
		return ifStats{}, err
	}
	var v []struct {
		Stats64 struct {
			Tx struct {
				Bytes   uint64 `json:"bytes"`
				Packets uint64 `json:"packets"`
				Dropped uint64 `json:"dropped"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &v); err != nil || len(v) == 0 {
		return ifStats{}, fmt.Errorf("stats of %s: %v", dev, err)
	}
	return ifStats{v[0].Stats64.Tx.Packets, v[0].Stats64.Tx.Bytes, v[0].Stats64.Tx.Dropped}, nil
}

// labTx is what the lab's two senders transmitted: every packet of the lab
// leaves the client or the server namespace first, where the agent counts it.
func (l *lab) labTx() (ifStats, error) {
	a, err := txStats(l.cli, cliIf)
	if err != nil {
		return a, err
	}
	b, err := txStats(l.srv, srvIf)
	return ifStats{a.Packets + b.Packets, a.Bytes + b.Bytes, a.Dropped + b.Dropped}, err
}

// ---- load generators ----

type heyResult struct {
	RPS               float64
	P50, P90, P99     float64 // ms
	Responses, Errors int
}

var (
	reRPS    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	rePct    = regexp.MustCompile(`\s(\d+)%+ in ([0-9.]+) secs`)
	reStatus = regexp.MustCompile(`\[(\d+)\]\s+(\d+) responses`)
)

func (o options) runHey(l *lab) (heyResult, error) {
	args := []string{"netns", "exec", l.cli, "hey", "-z", o.heyDur.String(), "-c", strconv.Itoa(o.heyConc),
		"-q", strconv.Itoa(o.heyQPS), "-t", "5"}
	if !o.keepalive {
		args = append(args, "-disable-keepalive")
	}
	args = append(args, "http://"+srvAddr+":8080/")
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return heyResult{}, fmt.Errorf("hey: %v: %s", err, out)
	}
	var r heyResult
	s := string(out)
	if m := reRPS.FindStringSubmatch(s); m != nil {
		r.RPS, _ = strconv.ParseFloat(m[1], 64)
	}
	for _, m := range rePct.FindAllStringSubmatch(s, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "50":
			r.P50 = v * 1000
		case "90":
			r.P90 = v * 1000
		case "99":
			r.P99 = v * 1000
		}
	}
	for _, m := range reStatus.FindAllStringSubmatch(s, -1) {
		n, _ := strconv.Atoi(m[2])
		if m[1] == "200" {
			r.Responses += n
		} else {
			r.Errors += n
		}
	}
	if i := strings.Index(s, "Error distribution:"); i >= 0 {
		for _, m := range regexp.MustCompile(`\[(\d+)\]`).FindAllStringSubmatch(s[i:], -1) {
			n, _ := strconv.Atoi(m[1])
			r.Errors += n
		}
	}
	if r.RPS == 0 {
		return r, fmt.Errorf("hey: no result in output: %s", s)
	}
	return r, nil
}

type iperfResult struct {
	Mbps     float64
	LostPct  float64
	Datagram int
}

func (o options) runIperf(l *lab, udp bool) (iperfResult, error) {
	args := []string{"netns", "exec", l.cli, "iperf3", "-c", srvAddr, "-p", "5201", "-t",
		strconv.Itoa(int(o.iperfDur.Seconds())), "-J"}
	if udp {
		args = append(args, "-u", "-b", o.udpRate, "-l", strconv.Itoa(o.udpLen))
	}
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		return iperfResult{}, fmt.Errorf("iperf3: %v: %s", err, out)
	}
	var v struct {
		End struct {
			Sum struct {
				BPS     float64 `json:"bits_per_second"`
				LostPct float64 `json:"lost_percent"`
			} `json:"sum"`
			SumReceived struct {
				BPS float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return iperfResult{}, fmt.Errorf("iperf3 output: %v", err)
	}
	if v.Error != "" {
		return iperfResult{}, fmt.Errorf("iperf3: %s", v.Error)
	}
	r := iperfResult{Mbps: v.End.Sum.BPS / 1e6, LostPct: v.End.Sum.LostPct}
	if !udp {
		r.Mbps = v.End.SumReceived.BPS / 1e6
	}
	return r, nil
}

// ---- the agent ----

type agentRun struct {
	metrics string // host:port of the agent's Prometheus endpoint
	cmd     *exec.Cmd
	coll    *exec.Cmd
	flows   string // JSON lines of the exported flows
	topic   string // Kafka topic of the exported flows (kafka-* exports)
	stderr  *testkit.SyncBuffer
	collErr *testkit.SyncBuffer
	pid     int
	progIDs []ebpf.ProgramID
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startAgentRetry is startAgent, tried again (up to three times) when a
// port picked by freePort was taken before the agent or collector bound it:
// a race with other processes that a benchmark run should not die of.
func (o options) startAgentRetry(l *lab, idx int) (*agentRun, error) {
	for try := 1; ; try++ {
		a, err := o.startAgent(l, idx)
		if err == nil || try == 3 || !strings.Contains(err.Error(), "address already in use") {
			return a, err
		}
		fmt.Fprintf(os.Stderr, "agent start %d: a port was taken meanwhile, retrying\n", idx)
	}
}

func (o options) startAgent(l *lab, idx int) (*agentRun, error) {
	a := &agentRun{flows: filepath.Join(o.out, fmt.Sprintf("live-flows-%d.jsonl", idx)), stderr: &testkit.SyncBuffer{}, collErr: &testkit.SyncBuffer{}}
	f, err := os.Create(a.flows)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	args := []string{"--netns", strings.Join([]string{l.cli, l.rtr, l.srv}, ","), "--interfaces", "/^flb[crs][0-9]$/",
		"--cache-active-timeout", o.period.String(), "--cache-max-flows", strconv.Itoa(o.cacheFlows),
		"--sampling", "1", "--features", "drops,rtt,retransmits", "--log-level", "debug"}
	if o.exportBuffer > 0 {
		args = append(args, "--export-buffer", strconv.Itoa(o.exportBuffer))
	}
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	a.metrics = fmt.Sprintf("127.0.0.1:%d", mport)
	args = append(args, "--metrics-address", a.metrics)
	var agentOut io.Writer = f
	switch {
	case o.export == "grpc":
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		collArgs := []string{"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--output", "json"}
		if o.tls {
			// The agent exports over TLS, as the operator's secure default
			// runs it (issue #27), so the run prices encryption.
			pki, err := receivertest.WritePKI(o.out)
			if err != nil {
				return nil, err
			}
			collArgs = append(collArgs, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey)
			args = append(args, "--tls", "--tls-ca", pki.CA)
		}
		a.coll = exec.Command(o.collBin, collArgs...)
		a.coll.Stdout, a.coll.Stderr = f, a.collErr
		if err := a.coll.Start(); err != nil {
			return nil, err
		}
		args = append(args, "--export", "grpc", "--target", fmt.Sprintf("127.0.0.1:%d", port))
		agentOut = io.Discard
	case kafkaMessage(o.export) != "":
		if a.topic, err = o.kafka.newTopic(); err != nil {
			return nil, err
		}
		args = append(args, o.kafka.agentArgs(o.export, a.topic)...)
		agentOut = io.Discard
	default:
		args = append(args, "--export", "stdout")
	}
	a.cmd = exec.Command(o.agentBin, args...)
	a.cmd.Stdout, a.cmd.Stderr = agentOut, a.stderr
	if idx == scaleIdx && o.goMemLimit != "" {
		a.cmd.Env = append(os.Environ(), "GOMEMLIMIT="+o.goMemLimit)
	}
	if err := a.cmd.Start(); err != nil {
		a.stopCollector()
		return nil, err
	}
	a.pid = a.cmd.Process.Pid
	// Ready when the four lab interfaces are attached (debug log lines).
	deadline := time.Now().Add(20 * time.Second)
	for {
		if n := strings.Count(a.stderr.String(), "msg=attached"); n >= 4 {
			break
		}
		if a.cmd.ProcessState != nil || time.Now().After(deadline) || !alive(a.pid) {
			a.stop()
			return nil, fmt.Errorf("agent not ready: %s", a.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	ids, err := progIDsOf(a.pid)
	if err != nil {
		a.stop()
		return nil, err
	}
	a.progIDs = ids
	return a, nil
}

// scrape reads the agent's metrics, summing each metric over its labels.
func scrape(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
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
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

type usage struct {
	UserS, SysS float64
	MaxRSSMB    float64
}

// stop sends SIGTERM (the agent detaches, flushes and exits) and returns
// its whole-life CPU from the kernel's rusage, and its peak RSS: its
// VmHWM, read until it exits. Not rusage's maxrss: os/exec starts a child
// with vfork, and at execve the kernel carries the high-water mark of the
// address space the child leaves, the driver's, into the child's maxrss
// (golang/go#32054): once the driver had consumed a Kafka scale run's
// 200k flows, every later agent's maxrss read 140 to 255 MB.
func (a *agentRun) stop() (usage, error) {
	var u usage
	hwm := vmHWM(a.pid)
	a.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	kill := time.After(30 * time.Second)
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			hwm = max(hwm, vmHWM(a.pid))
		case <-kill:
			a.cmd.Process.Kill()
			err = <-done
			break wait
		}
	}
	if ru, ok := a.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		u.UserS = tv(ru.Utime)
		u.SysS = tv(ru.Stime)
	}
	u.MaxRSSMB = hwm
	a.stopCollector()
	return u, err
}

// vmHWM is a live process's peak RSS in MB (VmHWM: its own address
// space's, since its execve), 0 once it has exited.
func vmHWM(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

func (a *agentRun) stopCollector() {
	if a.coll == nil || a.coll.Process == nil {
		return
	}
	a.coll.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- a.coll.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		a.coll.Process.Kill()
		<-done
	}
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// procCPU reads a live process's user and system CPU seconds.
func procCPU(pid int) (user, sys float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	tck := float64(100) // USER_HZ
	return ut / tck, st / tck, nil
}

// progIDsOf lists the BPF programs a process holds open (its fdinfo).
func progIDsOf(pid int) ([]ebpf.ProgramID, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []ebpf.ProgramID
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "prog_id:"); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				if n > 0 && !slices.Contains(ids, ebpf.ProgramID(n)) {
					ids = append(ids, ebpf.ProgramID(n))
				}
			}
		}
	}
	if len(ids) == 0 {
		return nil, errors.New("the agent holds no BPF program")
	}
	return ids, nil
}

type progStat struct {
	RunNs, RunCnt uint64
}

// progStats sums run time and count by program name.
func progStats(ids []ebpf.ProgramID) map[string]progStat {
	out := map[string]progStat{}
	for _, id := range ids {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, err := p.Info()
		if err == nil {
			if st, err := p.Stats(); err == nil {
				s := out[info.Name]
				s.RunNs += uint64(st.Runtime.Nanoseconds())
				s.RunCnt += st.RunCount
				out[info.Name] = s
			}
		}
		p.Close()
	}
	return out
}

// exported sums the flows in a JSON lines file.
func exported(path string) (records int, packets, bytes uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r struct {
			Packets uint64 `json:"packets"`
			Bytes   uint64 `json:"bytes"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue
		}
		records++
		packets += r.Packets
		bytes += r.Bytes
	}
	return records, packets, bytes, sc.Err()
}

// ---- runs ----

type result struct {
	Kind   string `json:"kind"` // A or B
	Round  int    `json:"round"`
	Hey    heyResult
	UDP    iperfResult
	TCP    iperfResult
	Window float64 `json:"window_s"`

	// B only.
	AgentUserS, AgentSysS float64 // from traffic start to exit
	AgentLifeS            float64 // whole life (incl. startup)
	MaxRSSMB              float64
	Records               int
	FlowsPerS             float64
	CPUPerFlowUS          float64
	Progs                 map[string]progStat
	KernelS               float64 // program run time in the window
	TCRuns                uint64
	TCNsPerRun            float64
	ExportedPackets       uint64
	IfacePackets          uint64
	ExportedBytes         uint64
	IfaceBytes            uint64
	Exact                 bool
}

func (o options) traffic(l *lab, r *result) error {
	start := time.Now()
	var err error
	if r.Hey, err = o.runHey(l); err != nil {
		return err
	}
	if r.UDP, err = o.runIperf(l, true); err != nil {
		return err
	}
	if o.tcp {
		if r.TCP, err = o.runIperf(l, false); err != nil {
			return err
		}
	}
	r.Window = time.Since(start).Seconds()
	return nil
}

func (o options) runA(l *lab, round int) (result, error) {
	r := result{Kind: "A", Round: round}
	return r, o.traffic(l, &r)
}

func (o options) runB(l *lab, round int) (result, error) {
	r := result{Kind: "B", Round: round}
	a, err := o.startAgentRetry(l, round)
	if err != nil {
		return r, err
	}
	tx0, err := l.labTx()
	if err != nil {
		a.stop()
		return r, err
	}
	u0, s0, _ := procCPU(a.pid)
	p0 := progStats(a.progIDs)
	if err := o.traffic(l, &r); err != nil {
		a.stop()
		return r, err
	}
	time.Sleep(500 * time.Millisecond) // last packets through the hooks
	p1 := progStats(a.progIDs)
	tx1, err := l.labTx()
	if err != nil {
		a.stop()
		return r, err
	}
	u, err := a.stop()
	if err != nil {
		return r, fmt.Errorf("agent exit: %v\n%s", err, tail(a.stderr.String(), 20))
	}
	r.AgentUserS, r.AgentSysS = u.UserS-u0, u.SysS-s0
	r.AgentLifeS = u.UserS + u.SysS
	r.MaxRSSMB = u.MaxRSSMB
	r.Progs = map[string]progStat{}
	for name, s := range p1 {
		d := progStat{s.RunNs - p0[name].RunNs, s.RunCnt - p0[name].RunCnt}
		r.Progs[name] = d
		r.KernelS += float64(d.RunNs) / 1e9
		if strings.HasPrefix(name, "flowlens_") {
			r.TCRuns += d.RunCnt
			r.TCNsPerRun += float64(d.RunNs)
		}
	}
	if r.TCRuns > 0 {
		r.TCNsPerRun /= float64(r.TCRuns)
	}
	r.Records, r.ExportedPackets, r.ExportedBytes, err = exported(a.flows)
	if err != nil {
		return r, err
	}
	r.IfacePackets, r.IfaceBytes = tx1.Packets-tx0.Packets, tx1.Bytes-tx0.Bytes
	r.Exact = r.ExportedPackets == r.IfacePackets && r.ExportedBytes == r.IfaceBytes
	r.FlowsPerS = float64(r.Records) / r.Window
	if r.Records > 0 {
		r.CPUPerFlowUS = (r.AgentUserS + r.AgentSysS) / float64(r.Records) * 1e6
	}
	os.Remove(a.flows)
	return r, nil
}

// scaleResult is the agent at a given number of flows per eviction.
type scaleResult struct {
	Export       string  `json:"export"`
	Round        int     `json:"round"`
	Flows        int     `json:"flows_sent"`
	Window       float64 `json:"window_s"`
	Records      int     `json:"records"`
	PerEviction  float64 `json:"flows_per_eviction"`
	AgentCPUS    float64 `json:"agent_cpu_s"`
	CPUPerFlowUS float64 `json:"cpu_per_flow_us"`
	MaxRSSMB     float64 `json:"max_rss_mb"`
	Exact        bool    `json:"exact"`
	ExportedPkts uint64  `json:"exported_packets"`
	IfacePkts    uint64  `json:"iface_packets"`
	Evictions    float64 `json:"evictions"`
	DroppedFlows float64 `json:"export_dropped_flows"`
	Overflow     float64 `json:"overflow_packets"`
	ExportBuffer int     `json:"export_buffer"`
	GoMemLimit   string  `json:"gomemlimit,omitempty"`
	Sink         string  `json:"sink"`
	// The agent's export counters, scraped after the last eviction of
	// the traffic. Its shutdown flush exports a few more: the records of
	// whatever came after, e.g. the host's loopback TCP (the enrichment
	// hooks see every socket), which the flows delivered include.
	AgentExported float64 `json:"agent_exported_flows"`
	AgentAcked    float64 `json:"agent_acked_flows"`  // kafka: in records the broker acked
	AgentFailed   float64 `json:"agent_failed_flows"` // kafka: in records that failed for good
	AgentRecords  float64 `json:"agent_acked_records"`
	// The agent's heap allocations (Go runtime counters) between the two
	// scrapes, per flow it exported meanwhile: timers, the pressure
	// checks and the first scrape's own included.
	MallocsPerFlow    float64   `json:"mallocs_per_flow"`
	AllocBytesPerFlow float64   `json:"alloc_bytes_per_flow"`
	Kafka             *delivery `json:"kafka,omitempty"` // what the broker holds (kafka-* exports)
}

const scaleIdx = 99

// runScale sprays o.scaleFlows new flows per eviction period, for two
// periods, through an agent sized for them.
func (o options) runScale(l *lab) (scaleResult, error) {
	r := scaleResult{Flows: 2 * o.scaleFlows}
	so := o
	so.cacheFlows = max(o.cacheFlows, o.scaleFlows*2) // no pressure eviction: one eviction per period
	a, err := so.startAgentRetry(l, scaleIdx)
	if err != nil {
		return r, err
	}
	tx0, err := l.labTx()
	if err != nil {
		a.stop()
		return r, err
	}
	u0, s0, _ := procCPU(a.pid)
	m0, _ := scrape(a.metrics) // the allocation counters before the traffic (nil: none)
	if o.scalePerf {
		perf, err := o.perfRecord(a.pid)
		if err != nil {
			a.stop()
			return r, err
		}
		defer perf.Wait() // it ends with the agent, its file written
	}
	self, _ := os.Executable()
	start := time.Now()
	dur := 2 * o.period
	r.Sink = o.scaleSink
	spray := fmt.Sprintf("%s,10.201.2.3,10.201.2.4,10.201.2.5:%d:%s:%s", srvAddr, r.Flows, dur, o.scaleSink)
	if err := nsdo(l.cli, self, "-spray", spray); err != nil {
		a.stop()
		return r, err
	}
	time.Sleep(o.period + time.Second) // the last sprayed flows are evicted
	r.Window = time.Since(start).Seconds()
	if m, err := scrape(a.metrics); err == nil {
		r.Evictions = m["flowlens_agent_evictions_total"]
		r.DroppedFlows = m["flowlens_agent_export_dropped_flows_total"]
		r.Overflow = m["flowlens_agent_overflow_records_total"] + m["flowlens_agent_overflow_lost_total"]
		r.AgentExported = m["flowlens_agent_export_flows_total"]
		r.AgentAcked = m["flowlens_agent_export_acked_flows_total"]
		r.AgentFailed = m["flowlens_agent_export_failed_flows_total"]
		r.AgentRecords = m["flowlens_agent_export_acked_records_total"]
		if n := r.AgentExported - m0["flowlens_agent_export_flows_total"]; m0 != nil && n > 0 {
			r.MallocsPerFlow = (m["go_memstats_mallocs_total"] - m0["go_memstats_mallocs_total"]) / n
			r.AllocBytesPerFlow = (m["go_memstats_alloc_bytes_total"] - m0["go_memstats_alloc_bytes_total"]) / n
		}
	} else {
		fmt.Fprintf(os.Stderr, "scale run: metrics: %v\n", err)
	}
	r.ExportBuffer, r.GoMemLimit = o.exportBuffer, o.goMemLimit
	tx1, err := l.labTx()
	if err != nil {
		a.stop()
		return r, err
	}
	u, err := a.stop()
	if err != nil {
		return r, fmt.Errorf("agent exit: %v\n%s", err, tail(a.stderr.String(), 20))
	}
	r.AgentCPUS = u.UserS + u.SysS - u0 - s0
	r.MaxRSSMB = u.MaxRSSMB
	var pkts, bytes uint64
	r.Records, pkts, bytes, err = exported(a.flows)
	if err != nil {
		return r, err
	}
	os.Remove(a.flows)
	if a.topic != "" { // the flows are the broker's
		d, err := o.kafka.delivered(a.topic)
		if err != nil {
			return r, err
		}
		r.Kafka = &d
		r.Records, pkts, bytes = d.Flows, d.Packets, d.Bytes
	}
	r.ExportedPkts, r.IfacePkts = pkts, tx1.Packets-tx0.Packets
	r.Exact = pkts == tx1.Packets-tx0.Packets && bytes == tx1.Bytes-tx0.Bytes
	r.PerEviction = float64(r.Records) / (float64(dur) / float64(o.period))
	if r.Evictions > 0 {
		r.PerEviction = (float64(r.Records) + r.DroppedFlows) / r.Evictions
	}
	if r.Records > 0 {
		r.CPUPerFlowUS = r.AgentCPUS / float64(r.Records) * 1e6
	}
	return r, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// openLab holds BPF program statistics (run_time_ns, run_cnt) on, builds a
// lab, removes it if the run is interrupted, and starts the server
// namespace's HTTP server and UDP sink. done undoes it all.
func openLab(build func() (*lab, error)) (l *lab, done func(), err error) {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, nil, fmt.Errorf("enable BPF stats: %w", err)
	}
	if l, err = build(); err != nil {
		stats.Close()
		return nil, nil, err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok { // interrupted: remove the lab before dying
			l.close()
			os.Exit(130)
		}
	}()
	done = func() { signal.Stop(sigs); close(sigs); l.close(); stats.Close() }
	self, _ := os.Executable()
	if err := l.start(l.srv, self, "-serve-http", srvAddr+":8080"); err != nil {
		done()
		return nil, nil, err
	}
	if err := l.start(l.srv, self, "-serve-udp", fmt.Sprintf(":%d", sinkPort)); err != nil {
		done()
		return nil, nil, err
	}
	return l, done, nil
}

// linkSteps are the commands that join the client and server namespaces to
// the middle one by veths (the middle ends named cliPeer and srvPeer) and
// make every namespace IPv4-only, so every frame on the lab links is one
// the agents count.
func run(o options) error {
	if o.scaleSink != "socket" && o.scaleSink != "closed-ports" {
		return fmt.Errorf("-scale-sink %q: want socket or closed-ports", o.scaleSink)
	}
	if _, err := o.scaleExportList(); err != nil { // before the rounds' minutes
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	// BPF program statistics (run_time_ns, run_cnt) while this fd is open.
	l, done, err := openLab(newLab)
	if err != nil {
		return err
	}
	defer done()
	if err := l.start(l.srv, "iperf3", "-s", "-p", "5201"); err != nil {
		return err
	}
	time.Sleep(time.Second)

	fmt.Printf("flowlens bench-live: %d rounds of A (no agent), B (agent), A; export %s\n", o.rounds, o.export)
	fmt.Printf("load: hey -c %d -q %d (%d req/s offered, keepalive %v) for %s; iperf3 UDP -b %s -l %d for %s; iperf3 TCP unpaced %v\n",
		o.heyConc, o.heyQPS, o.heyConc*o.heyQPS, o.keepalive, o.heyDur, o.udpRate, o.udpLen, o.iperfDur, o.tcp)
	fmt.Printf("machine: %s\n\n", machine())

	// Warm-up (page cache, first connections), not reported.
	if _, err := o.runA(l, 0); o.rounds > 0 && err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	var all []result
	for round := 1; round <= o.rounds; round++ {
		for _, kind := range []string{"A", "B", "A"} {
			var r result
			var err error
			if kind == "A" {
				r, err = o.runA(l, round)
			} else {
				r, err = o.runB(l, round)
			}
			if err != nil {
				return fmt.Errorf("round %d %s: %w", round, kind, err)
			}
			all = append(all, r)
			fmt.Fprintf(os.Stderr, "round %d %s: %.0f req/s p99 %.2f ms, udp %.1f Mb/s, tcp %.0f Mb/s", round, kind, r.Hey.RPS, r.Hey.P99, r.UDP.Mbps, r.TCP.Mbps)
			if kind == "B" {
				fmt.Fprintf(os.Stderr, ", agent %.2f s CPU, %d flows, %.0f ns/run, exact=%v", r.AgentUserS+r.AgentSysS, r.Records, r.TCNsPerRun, r.Exact)
			}
			fmt.Fprintln(os.Stderr)
		}
	}
	if len(all) > 0 {
		report(o, all)
	}
	// The scale runs, with the agent's export queue as configured (its
	// default holds one full eviction; -export-buffer 64, the old default,
	// shows a burst overflowing a smaller queue).
	var scales []scaleResult
	if o.scaleFlows > 0 {
		if scales, err = o.runScales(l); err != nil {
			return fmt.Errorf("scale run: %w", err)
		}
	}
	b, _ := json.MarshalIndent(map[string]any{"machine": machine(), "options": map[string]any{
		"rounds": o.rounds, "hey_c": o.heyConc, "hey_q": o.heyQPS, "hey_duration_s": o.heyDur.Seconds(),
		"keepalive": o.keepalive, "udp_rate": o.udpRate, "udp_len": o.udpLen, "export": o.export,
		"scale_exports": o.scaleExports, "scale_rounds": o.scaleRounds,
	}, "runs": all, "scale": scales}, "", "  ")
	return os.WriteFile(filepath.Join(o.out, "live.json"), append(b, '\n'), 0o644)
}

func machine() string {
	var u unix.Utsname
	unix.Uname(&u)
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("%s, %d CPUs, kernel %s, load average %s", model, numCPU(), unix.ByteSliceToString(u.Release[:]),
		strings.Join(strings.Fields(string(load))[:3], " "))
}

func numCPU() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		return set.Count()
	}
	return 0
}

// ---- report ----

func med(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func report(o options, all []result) {
	type triple struct{ a1, b, a2 result }
	var rounds []triple
	for i := 0; i+2 < len(all); i += 3 {
		rounds = append(rounds, triple{all[i], all[i+1], all[i+2]})
	}
	metric := func(name string, f func(result) float64, diff bool) {
		var a1, b, a2, ab, aa []float64
		for _, t := range rounds {
			x, y, z := f(t.a1), f(t.b), f(t.a2)
			a1, b, a2 = append(a1, x), append(b, y), append(a2, z)
			// B against the mean of its two A runs; A/A: second A against the first.
			// diff: differences instead of ratios (quantities near zero).
			if diff {
				ab = append(ab, y-(x+z)/2)
				aa = append(aa, z-x)
			} else {
				ab = append(ab, y/((x+z)/2))
				aa = append(aa, z/x)
			}
		}
		fmt.Printf("%-28s %10.3f %10.3f %10.3f | %8.3f %8.3f   [%s..%s]\n", name, med(a1), med(b), med(a2), med(ab), med(aa),
			fmtF(slices.Min(aa)), fmtF(slices.Max(aa)))
	}
	fmt.Println()
	fmt.Println("Medians over rounds. A/B = B / mean(A before, A after); A/A = A after / A before (noise band: min..max of A/A)")
	fmt.Printf("%-28s %10s %10s %10s | %8s %8s   %s\n", "metric", "A (before)", "B (agent)", "A (after)", "A/B", "A/A", "A/A range")
	fmt.Println(strings.Repeat("-", 104))
	metric("hey requests/s", func(r result) float64 { return r.Hey.RPS }, false)
	metric("hey p50 latency (ms)", func(r result) float64 { return r.Hey.P50 }, false)
	metric("hey p90 latency (ms)", func(r result) float64 { return r.Hey.P90 }, false)
	metric("hey p99 latency (ms)", func(r result) float64 { return r.Hey.P99 }, false)
	metric("iperf3 UDP fixed rate Mb/s", func(r result) float64 { return r.UDP.Mbps }, false)
	metric("iperf3 UDP loss % (B-A, A-A)", func(r result) float64 { return r.UDP.LostPct }, true)
	if o.tcp {
		metric("iperf3 TCP unpaced Mb/s", func(r result) float64 { return r.TCP.Mbps }, false)
	}
	var bs []result
	for _, t := range rounds {
		bs = append(bs, t.b)
	}
	col := func(f func(result) float64) float64 {
		var v []float64
		for _, r := range bs {
			v = append(v, f(r))
		}
		return med(v)
	}
	fmt.Println()
	fmt.Println("Agent (B runs, medians)")
	window := col(func(r result) float64 { return r.Window })
	agentCPU := col(func(r result) float64 { return r.AgentUserS + r.AgentSysS })
	kernel := col(func(r result) float64 { return r.KernelS })
	fmt.Printf("  traffic window                      %8.1f s\n", window)
	fmt.Printf("  agent CPU user+system (window+exit) %8.3f s  (user %.3f, system %.3f; whole life incl. startup %.3f s)\n", agentCPU,
		col(func(r result) float64 { return r.AgentUserS }), col(func(r result) float64 { return r.AgentSysS }),
		col(func(r result) float64 { return r.AgentLifeS }))
	fmt.Printf("  BPF program time (all programs)     %8.3f s\n", kernel)
	fmt.Printf("  host CPU the agent adds             %8.3f s = %.2f %% of one CPU over the window\n", agentCPU+kernel, (agentCPU+kernel)/window*100)
	fmt.Printf("  peak RSS (VmHWM)                    %8.1f MB\n", col(func(r result) float64 { return r.MaxRSSMB }))
	fmt.Printf("  flows exported                      %8.0f  (%.0f flows/s)\n", col(func(r result) float64 { return float64(r.Records) }),
		col(func(r result) float64 { return r.FlowsPerS }))
	fmt.Printf("  agent CPU per exported flow         %8.2f µs\n", col(func(r result) float64 { return r.CPUPerFlowUS }))
	fmt.Printf("  TC program time per run             %8.1f ns  (%.0f runs, 4 hooks per forwarded packet)\n",
		col(func(r result) float64 { return r.TCNsPerRun }), col(func(r result) float64 { return float64(r.TCRuns) }))
	names := map[string]bool{}
	for _, r := range bs {
		for n := range r.Progs {
			names[n] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	slices.Sort(sorted)
	for _, n := range sorted {
		fmt.Printf("    %-18s %10.1f ns/run  %10.0f runs\n", n,
			col(func(r result) float64 {
				s := r.Progs[n]
				if s.RunCnt == 0 {
					return 0
				}
				return float64(s.RunNs) / float64(s.RunCnt)
			}),
			col(func(r result) float64 { return float64(r.Progs[n].RunCnt) }))
	}
	fmt.Println()
	fmt.Println("Exact-count check (packets and bytes in exported flows vs the lab senders' tx counters)")
	for _, r := range bs {
		verdict := "EXACT"
		if !r.Exact {
			verdict = "MISMATCH"
		}
		fmt.Printf("  round %d: exported %d packets / %d bytes, interfaces %d packets / %d bytes: %s\n",
			r.Round, r.ExportedPackets, r.ExportedBytes, r.IfacePackets, r.IfaceBytes, verdict)
	}
}

func fmtF(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

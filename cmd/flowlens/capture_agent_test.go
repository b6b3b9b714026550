package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// The capture lab: pod shop/client-1 and pod data/server-0, each in its
// network namespace, joined by a veth pair; the real agent (node
// node-cap) watches both ends and exports to a real collector, which
// knows the pods (--k8s-static); the real CLI captures through it.
const (
	capClientIP = "10.177.45.1"
	capServerIP = "10.177.45.2"
	capNode     = "node-cap"
)

type captureLab struct {
	cl, sv     *netlab.Netns
	col        string
	colProc    *testkit.Proc
	colMetrics string // the collector's /metrics
	h          *agenttest.Harness
	metrics    string // the agent's /metrics
}

func startCaptureLab(t *testing.T) *captureLab {
	netlab.Require(t)
	l := &captureLab{cl: netlab.NewNetns(t, "cap-cl"), sv: netlab.NewNetns(t, "cap-sv")}
	netlab.Quiet(t, l.cl)
	netlab.Quiet(t, l.sv)
	netlab.Veth(t, l.cl, "cap-cl0", l.sv, "cap-sv0")
	netlab.AddAddr(t, l.cl, "cap-cl0", capClientIP+"/24")
	netlab.AddAddr(t, l.sv, "cap-sv0", capServerIP+"/24")
	static := filepath.Join(t.TempDir(), "cluster.json")
	js, _ := json.Marshal(map[string]enriched.K8sContext{
		capClientIP: {Kind: enriched.KindPod, Namespace: "shop", Name: "client-1", Workload: "client", WorkloadKind: "Deployment", Node: capNode},
		capServerIP: {Kind: enriched.KindPod, Namespace: "data", Name: "server-0", Workload: "server", WorkloadKind: "StatefulSet", Node: capNode},
	})
	if err := os.WriteFile(static, js, 0o644); err != nil {
		t.Fatal(err)
	}
	colMetrics := testkit.FreeAddr(t)
	l.col, l.colProc = startCollectorProc(t, "--k8s-static="+static, "--metrics-address="+colMetrics)
	l.colMetrics = "http://" + colMetrics + "/metrics"
	l.h = agenttest.Start(t, 2, agent.Options{}, "--netns="+l.cl.Name+","+l.sv.Name, "--export=grpc", "--target="+l.col,
		"--node-name="+capNode, "--metrics-address="+testkit.FreeAddr(t))
	l.metrics = "http://" + l.h.A.MetricsAddr() + "/metrics"
	// The agent's capture stream is up once a capture reaches its node.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var out, errOut strings.Builder
		run(context.Background(), []string{"capture", "--server", l.col, "-o", "json", "--to-port", "1", "--duration", "100ms"},
			func(string) string { return "" }, &out, &errOut)
		if !strings.Contains(errOut.String(), "no agent") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's capture stream not up after 60s: %s", errOut.String())
		}
	}
	return l
}

// running is the agent's flowlens_agent_captures_running.
func (l *captureLab) running(t *testing.T) float64 {
	v, _ := promtest.Value(promtest.Scrape(t, l.metrics), "flowlens_agent_captures_running")
	return v
}

// waitRunning polls the agent's gauge until it is want.
func (l *captureLab) waitRunning(t *testing.T, want float64, why string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); l.running(t) != want; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: flowlens_agent_captures_running %v after 60s, want %v", why, l.running(t), want)
		}
	}
}

// capture runs the CLI in the background; wait returns its exit code,
// stdout and stderr.
type cliRun struct {
	done        chan struct{}
	code        int
	out, errOut strings.Builder
}

func (l *captureLab) capture(args ...string) *cliRun {
	return l.captureCtx(context.Background(), args...)
}

func (l *captureLab) captureCtx(ctx context.Context, args ...string) *cliRun {
	r := &cliRun{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.code = run(ctx, append([]string{"capture", "--server", l.col}, args...), func(string) string { return "" }, &r.out, &r.errOut)
	}()
	return r
}

func (r *cliRun) wait(t *testing.T) (int, string, string) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(120 * time.Second):
		t.Fatal("flowlens capture did not return in 120s")
	}
	return r.code, r.out.String(), r.errOut.String()
}

// send sends n datagrams client → server port, the i-th with 100+i bytes
// of payload, from source port sport.
func (l *captureLab) send(t *testing.T, sport, port, n int) {
	t.Helper()
	for i := range n {
		if err := netlab.UDPSend(l.cl, fmt.Sprintf("%s:%d", capClientIP, sport), fmt.Sprintf("%s:%d", capServerIP, port), make([]byte, 100+i), 1); err != nil {
			t.Fatal(err)
		}
	}
}

// The end-to-end capture: the real agent, collector and CLI; tshark
// reads the pcapng. 200 matching datagrams among others: exactly those,
// with their addresses, ports, wire lengths and snaplen, interface and
// comment, in time order; a path over two interfaces: each datagram once
// on each, two interface blocks; --max-packets 50 stops at 50; --duration
// 2s returns and says why; the collector's metrics count what it passed
// on; an interrupted CLI writes what it got; a SIGKILLed CLI, then a
// SIGKILLed collector, end the capture on the agent
// (flowlens_agent_captures_running back to 0).
func TestCaptureEndToEnd(t *testing.T) {
	l := startCaptureLab(t)
	dir := t.TempDir()
	udp, err := netlab.UDPListen(l.sv, capServerIP+":7001")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	const snaplen = 64
	fields := []string{"frame.interface_name", "ip.src", "ip.dst", "udp.srcport", "udp.dstport", "frame.len", "frame.cap_len", "frame.comment", "frame.time_epoch"}
	wantComment := "node=node-cap src=pod:shop/client-1(Deployment/client) dst=pod:data/server-0(StatefulSet/server)"

	check := func(t *testing.T, rows [][]string, iface string, i int) {
		t.Helper()
		wire := 14 + 20 + 8 + 100 + i
		want := []string{iface, capClientIP, capServerIP, "5001", "7001", fmt.Sprint(wire), fmt.Sprint(min(snaplen, wire)), wantComment}
		if got := rows[0][:8]; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("datagram %d on %s: tshark read %q, want %q", i, iface, got, want)
		}
	}

	t.Run("200 datagrams", func(t *testing.T) {
		// Names resolved by the collector (--pod), ingress only: each
		// datagram is seen once, entering the server's namespace.
		file := filepath.Join(dir, "200.pcapng")
		r := l.capture("-w", file, "--pod", "shop/client-1", "--protocol", "udp", "--to-port", "7001", "--direction", "ingress",
			"--snaplen", fmt.Sprint(snaplen), "--max-packets", "200", "--duration", "5m")
		l.waitRunning(t, 1, "capture started")
		l.send(t, 5002, 7002, 50) // not matching: another port
		l.send(t, 5001, 7001, 200)
		code, out, errOut := r.wait(t)
		if code != 0 || out != "" || errOut != "200 packets captured\ncapture ended: --max-packets reached\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		rows := tshark(t, file, fields...)
		if len(rows) != 200 {
			t.Fatalf("tshark read %d packets, want 200", len(rows))
		}
		last := ""
		for i, row := range rows {
			check(t, [][]string{row}, "cap-sv0", i)
			if row[8] < last {
				t.Errorf("packet %d at %s, before the previous %s", i, row[8], last)
			}
			last = row[8]
		}
		l.waitRunning(t, 0, "capture ended")
	})

	t.Run("both interfaces", func(t *testing.T) {
		// Both directions: each datagram leaves the client's veth and
		// enters the server's: once per interface.
		file := filepath.Join(dir, "both.pcapng")
		r := l.capture("-w", file, "--ip", capServerIP, "--to-port", "7001", "--snaplen", fmt.Sprint(snaplen), "--max-packets", "40", "--duration", "5m")
		l.waitRunning(t, 1, "capture started")
		l.send(t, 5001, 7001, 20)
		code, _, errOut := r.wait(t)
		if code != 0 || errOut != "40 packets captured\ncapture ended: --max-packets reached\n" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		rows := tshark(t, file, fields...)
		per := map[string][][]string{}
		for _, row := range rows {
			per[row[0]] = append(per[row[0]], row)
		}
		if len(rows) != 40 || len(per["cap-cl0"]) != 20 || len(per["cap-sv0"]) != 20 {
			t.Fatalf("tshark read %d packets: %d on cap-cl0, %d on cap-sv0; want 20 on each", len(rows), len(per["cap-cl0"]), len(per["cap-sv0"]))
		}
		for _, iface := range []string{"cap-cl0", "cap-sv0"} {
			for i, row := range per[iface] {
				check(t, [][]string{row}, iface, i)
			}
		}
		out, err := exec.Command("capinfos", "-I", file).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Number of interfaces in file: 2") {
			t.Errorf("capinfos: %v\n%s", err, out)
		}
		l.waitRunning(t, 0, "capture ended")
	})

	t.Run("max-packets 50", func(t *testing.T) {
		r := l.capture("-o", "json", "--to-port", "7001", "--direction", "ingress", "--max-packets", "50", "--duration", "5m")
		l.waitRunning(t, 1, "capture started")
		l.send(t, 5001, 7001, 200)
		code, out, errOut := r.wait(t)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 50 || errOut != "50 packets captured\ncapture ended: --max-packets reached\n" {
			t.Fatalf("exit %d, %d lines, stderr %q", code, len(lines), errOut)
		}
		var p packetSummary
		if err := json.Unmarshal([]byte(lines[0]), &p); err != nil || p.Src != capClientIP+":5001" || p.Dst != capServerIP+":7001" ||
			p.Protocol != "udp" || p.Interface != "cap-sv0" || p.Node != capNode || p.WireLength != 142 || p.SrcK8s.GetName() != "client-1" {
			t.Errorf("first line %s: %+v, %v", lines[0], p, err)
		}
		l.waitRunning(t, 0, "capture ended")
		// The collector passed on 200 + 40 + 50 packets, lost none.
		fams := promtest.Scrape(t, l.colMetrics)
		promtest.Expect(t, fams, 290, "flowlens_collector_capture_packets_total")
		promtest.Expect(t, fams, 0, "flowlens_collector_captures_running")
		for _, r := range []string{"ring_full", "consumer", "relay"} {
			promtest.Expect(t, fams, 0, "flowlens_collector_capture_lost_packets_total", "reason="+r)
		}
	})

	t.Run("duration 2s", func(t *testing.T) {
		code, out, errOut := l.capture("-o", "json", "--to-port", "7999", "--duration", "2s").wait(t)
		if code != 0 || out != "" || errOut != "0 packets captured\ncapture ended: --duration passed\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		l.waitRunning(t, 0, "capture ended")
	})

	t.Run("interrupted", func(t *testing.T) {
		// Ctrl-C: the capture ends on the agent, and what came is
		// written (how much of the 10 datagrams the CLI had read when
		// interrupted is timing: the file holds what it says).
		before, _ := promtest.Value(promtest.Scrape(t, l.colMetrics), "flowlens_collector_capture_packets_total")
		ctx, interrupt := context.WithCancel(context.Background())
		file := filepath.Join(dir, "interrupted.pcapng")
		r := l.captureCtx(ctx, "-w", file, "--to-port", "7001", "--direction", "ingress", "--duration", "10m")
		l.waitRunning(t, 1, "capture started")
		l.send(t, 5001, 7001, 10)
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if v, _ := promtest.Value(promtest.Scrape(t, l.colMetrics), "flowlens_collector_capture_packets_total"); v-before == 10 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the collector did not pass on 10 packets in 60s")
			}
		}
		interrupt()
		code, _, errOut := r.wait(t)
		var n int
		if _, err := fmt.Sscanf(errOut, "%d packets captured\ncapture ended: interrupted\n", &n); err != nil || code != 0 || n > 10 ||
			errOut != fmt.Sprintf("%d packets captured\ncapture ended: interrupted\n", n) {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		if rows := tshark(t, file, "frame.interface_name"); len(rows) != n {
			t.Errorf("tshark read %d packets, the CLI said %d", len(rows), n)
		}
		t.Logf("%d of 10 packets read before the interruption", n)
		l.waitRunning(t, 0, "the capture interrupted")
	})

	t.Run("streams to tshark", func(t *testing.T) {
		// `flowlens capture -w - | tshark -i -`: the real CLI binary
		// writes into a pipe that a real tshark reads live. tshark prints
		// the first 10 datagrams while the capture still runs (it ends
		// only at --max-packets 30), then exactly 30.
		if _, err := exec.LookPath("tshark"); err != nil {
			testkit.Need(t, "tshark", fmt.Errorf("%v: install it with `sudo hack/install-deps.sh test`", err))
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cli := exec.Command(buildCLI(t), "capture", "--server", l.col, "-w", "-", "--to-port", "7001", "--direction", "ingress",
			"--max-packets", "30", "--duration", "5m")
		cli.Stdout = pw
		var cliErr strings.Builder
		cli.Stderr = &cliErr
		ts := exec.Command("tshark", "-i", "-", "-l", "-T", "fields", "-e", "udp.srcport", "-e", "frame.interface_name")
		ts.Stdin = pr
		tsOut, err := ts.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := testkit.StartOwned(ts); err != nil {
			t.Fatal(err)
		}
		if err := testkit.StartOwned(cli); err != nil {
			t.Fatal(err)
		}
		pr.Close()
		pw.Close()
		var mu sync.Mutex
		var lines []string
		read := make(chan struct{})
		go func() {
			defer close(read)
			sc := bufio.NewScanner(tsOut)
			for sc.Scan() {
				mu.Lock()
				lines = append(lines, sc.Text())
				mu.Unlock()
			}
		}()
		cliDone := make(chan error, 1)
		go func() { cliDone <- cli.Wait() }()
		count := func() int { mu.Lock(); defer mu.Unlock(); return len(lines) }
		l.waitRunning(t, 1, "capture started")
		l.send(t, 5001, 7001, 10)
		for deadline := time.Now().Add(60 * time.Second); count() < 10; time.Sleep(50 * time.Millisecond) {
			select {
			case err := <-cliDone:
				t.Fatalf("the CLI ended (%v) before tshark read 10 packets (%d): %s", err, count(), cliErr.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("tshark read %d packets in 60s while the capture ran, want 10", count())
			}
		}
		select {
		case err := <-cliDone:
			t.Fatalf("the CLI ended (%v) before its 30 packets", err)
		default:
		}
		if n := count(); n != 10 {
			t.Fatalf("tshark read %d packets while the capture ran, want 10", n)
		}
		l.send(t, 5001, 7001, 20)
		select {
		case err := <-cliDone:
			if err != nil {
				t.Fatalf("the CLI: %v: %s", err, cliErr.String())
			}
		case <-time.After(120 * time.Second):
			t.Fatal("the CLI did not end in 120s")
		}
		<-read
		ts.Wait()
		if cliErr.String() != "30 packets captured\ncapture ended: --max-packets reached\n" {
			t.Errorf("stderr %q", cliErr.String())
		}
		if len(lines) != 30 {
			t.Fatalf("tshark read %d packets, want 30", len(lines))
		}
		for i, line := range lines {
			if line != "5001\tcap-sv0" {
				t.Errorf("packet %d: tshark read %q, want 5001 on cap-sv0", i, line)
			}
		}
		l.waitRunning(t, 0, "capture ended")
	})

	t.Run("killed CLI", func(t *testing.T) {
		// The real CLI binary, killed with SIGKILL mid-capture: the
		// collector sees its call end and cancels the capture on the agent.
		cli := exec.Command(buildCLI(t), "capture", "--server", l.col, "-w", filepath.Join(dir, "killed.pcapng"), "--duration", "10m")
		if err := testkit.StartOwned(cli); err != nil {
			t.Fatal(err)
		}
		l.waitRunning(t, 1, "capture started")
		if err := cli.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cli.Wait()
		l.waitRunning(t, 0, "the CLI killed")
	})

	t.Run("killed collector", func(t *testing.T) {
		// The collector killed mid-capture: the agent's stream ends, and
		// its captures with it; the CLI says the collector is gone.
		r := l.capture("-o", "json", "--duration", "10m")
		l.waitRunning(t, 1, "capture started")
		if err := l.colProc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		l.waitRunning(t, 0, "the collector killed")
		if code, _, errOut := r.wait(t); code != 1 || !strings.HasPrefix(errOut, "flowlens capture: "+l.col+": ") {
			t.Errorf("exit %d, stderr %q; want 1 and the collector named", code, errOut)
		}
	})
}

// buildCLI builds cmd/flowlens once.
func buildCLI(t *testing.T) string {
	t.Helper()
	return testkit.Build(t, "./cmd/flowlens")
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/receiver"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// procKB reads a "Vm...:  N kB" line of /proc/pid/status.
func procKB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// exportRaw sends payload as one Export message and returns the stream's
// status.
func exportRaw(conn *grpc.ClientConn, payload []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return receivertest.ExportRaw(ctx, conn, payload)
}

// metric reads one unlabelled series (or one with the given labels, as
// "name{labels}") from the collector's /metrics.
func metric(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in /metrics", series)
	return 0
}

// agentRecords are n distinct agent records of batch b.
func agentRecords(b, n int) []flow.Record {
	t0 := time.Unix(1_700_000_000, 0)
	out := make([]flow.Record, n)
	for i := range out {
		k := uint64(b*n + i + 1)
		out[i] = flow.Record{SrcAddr: netip.AddrFrom4([4]byte{10, 1, byte(b >> 8), byte(b)}), DstAddr: netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}),
			SrcPort: uint16(10000 + i%50000), DstPort: 443, Proto: 6, Bytes: 100 * k, Packets: k, StartTime: t0, EndTime: t0.Add(time.Second), Sampling: 1,
			Interfaces: []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", NetnsID: 1, Direction: flow.DirEgress}}}
	}
	return out
}

// TestBoundedAgainstBinary runs the collector binary with its defaults
// (4 MiB messages, 100,000 flows per message, a history of 100,000
// flows) and sends it, over gRPC, a 4 MiB and a 16 MiB message of empty
// flows: 2 bytes each on the wire, hundreds in memory decoded. Each is
// answered within a second with ResourceExhausted (the flow count; the
// size); the collector's peak resident memory (VmHWM) stays below
// twice its idle RSS plus what its full history takes; and the agent's
// gRPC exporter, streaming flows all along, loses none (the collector
// counts exactly what it sent).
func TestBoundedAgainstBinary(t *testing.T) {
	if testkit.Short() {
		t.Skip("builds and runs the collector binary: not in short mode")
	}
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "flowlens-collector")
	build := exec.Command("go", "build", "-o", bin, "./cmd/flowlens-collector")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the collector: %v\n%s", err, out)
	}
	grpcAddr, metricsAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	logf, err := os.Create(filepath.Join(t.TempDir(), "collector.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--listen="+grpcAddr, "--metrics-address="+metricsAddr, "--output=none", "--k8s-enrich=false")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := testkit.StartOwned(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			l, _ := os.ReadFile(logf.Name())
			t.Logf("collector log:\n%s", l)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + metricsAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the collector did not get ready")
		}
	}
	pid := cmd.Process.Pid
	time.Sleep(time.Second)
	idle := procKB(t, pid, "VmRSS")

	exp, err := grpcexp.New(grpcexp.Config{Target: grpcAddr, NodeName: "node-a", BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	const perBatch = 1000
	sent := 0
	export := func(b int) {
		if err := exp.Export(context.Background(), agentRecords(b, perBatch)); err != nil {
			t.Error(err)
			return
		}
		sent += perBatch
	}
	received := func() float64 { return metric(t, metricsAddr, "flowlens_collector_received_flows_total") }
	waitReceived := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); received() != float64(n); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the collector received %v flows, want %d", received(), n)
			}
		}
	}
	// stream exports a batch every 10 ms until stop is closed.
	b := 0
	stream := func(stop chan struct{}) (wait func()) {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tick := time.NewTicker(10 * time.Millisecond); ; b++ {
				select {
				case <-stop:
					tick.Stop()
					return
				case <-tick.C:
				}
				export(b)
			}
		}()
		return wg.Wait
	}
	// Fill the history (its default size), then stream on for 3 s as
	// the attack will: the peak of a collector whose history turns over
	// (the Go heap grows to twice what is live between collections) is
	// what its history takes.
	for ; sent < 100_000; b++ {
		export(b)
	}
	waitReceived(sent)
	stopA := make(chan struct{})
	waitA := stream(stopA)
	time.Sleep(3 * time.Second)
	close(stopA)
	waitA()
	waitReceived(sent)
	normal := procKB(t, pid, "VmHWM")
	history := max(normal-idle, 0)

	// The attack, while the agent streams on.
	stop := make(chan struct{})
	wait := stream(stop)
	attackStart := time.Now()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, tc := range []struct {
		flows int
		want  string
	}{
		// 4 MiB, the default limit: read, counted in place, refused.
		{receiver.DefaultMaxMessageBytes / 2, fmt.Sprintf("collector: %d flows in one message, max %d", receiver.DefaultMaxMessageBytes/2, receiver.DefaultMaxFlowsPerBatch)},
		// 16 MiB: refused from its length, before it is read.
		{8 << 20, fmt.Sprintf("grpc: received message larger than max (%d vs. %d)", 16<<20, receiver.DefaultMaxMessageBytes)},
	} {
		msg := make([]byte, 0, 2*tc.flows)
		for range tc.flows {
			msg = protowire.AppendBytes(protowire.AppendTag(msg, 1, protowire.BytesType), nil)
		}
		start := time.Now()
		err := exportRaw(conn, msg)
		d := time.Since(start)
		if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != tc.want {
			t.Errorf("%d bytes of empty flows: %v, want ResourceExhausted %q", len(msg), err, tc.want)
		}
		if d > time.Second {
			t.Errorf("%d bytes of empty flows: answered after %v, want within a second", len(msg), d)
		}
		t.Logf("%d bytes of empty flows: answered in %v: %v", len(msg), d.Round(time.Millisecond), err)
	}
	time.Sleep(3*time.Second - time.Since(attackStart)) // as long as the normal phase
	close(stop)
	wait()
	waitReceived(sent)
	if n := exp.Stats.Refused.Load(); n != 0 {
		t.Errorf("the agent's exporter saw %d refusals", n)
	}
	peak := procKB(t, pid, "VmHWM")
	t.Logf("RSS idle %d KiB, peak with the history turning over %d KiB (history %d KiB), peak with the attack %d KiB (bound %d KiB); the agent sent %d flows, all received",
		idle, normal, history, peak, 2*idle+history, sent)
	if peak >= 2*idle+history {
		t.Errorf("peak RSS %d KiB, want below twice the idle RSS (%d KiB) plus the history (%d KiB)", peak, idle, history)
	}
	if v := metric(t, metricsAddr, `flowlens_collector_refused_flows_total{reason="too_many_flows"}`); v != float64(receiver.DefaultMaxMessageBytes/2) {
		t.Errorf("refused_flows_total{too_many_flows} = %v", v)
	}
}

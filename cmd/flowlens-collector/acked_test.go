package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The agent's gRPC exporter against the collector binary killed with
// SIGKILL and started again four times, with --ack-state-file: every flow
// the exporter was given is in the collectors' JSON output (one file the
// successive processes append to, which outlives them) exactly once, and
// acknowledged.
func TestAckedAcrossSIGKILL(t *testing.T) {
	if testkit.Short() {
		t.Skip("builds and runs the collector binary: not in short mode")
	}
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "flowlens-collector")
	build := exec.Command("go", "build", "-o", bin, "./cmd/flowlens-collector")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the collector: %v\n%s", err, out)
	}
	grpcAddr, metricsAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	outPath, logPath := filepath.Join(dir, "flows.jsonl"), filepath.Join(dir, "collector.log")
	var cmd *exec.Cmd
	startCollector := func() {
		t.Helper()
		out, err := os.OpenFile(outPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		cmd = exec.Command(bin, "--listen="+grpcAddr, "--metrics-address="+metricsAddr, "--output=json", "--k8s-enrich=false",
			"--ack-state-file="+filepath.Join(dir, "acks"))
		cmd.Stdout, cmd.Stderr = out, logf
		if err := testkit.StartOwned(cmd); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if resp, err := http.Get("http://" + metricsAddr + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the collector did not get ready")
			}
		}
	}
	t.Cleanup(func() {
		if cmd != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			l, _ := os.ReadFile(logPath)
			t.Logf("collector logs:\n%s", l)
		}
	})
	startCollector()

	exp, err := grpcexp.New(grpcexp.Config{Target: grpcAddr, NodeName: "node-a", MaxUnackedBatches: 8,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const batches, size = 40, 25
	t0 := time.Unix(1_700_000_000, 0)
	exported := make(chan error, 1)
	go func() {
		for b := range batches {
			recs := make([]flow.Record, size)
			for i := range recs {
				k := uint64(b*size + i + 1) // packets identify the flow
				recs[i] = flow.Record{SrcAddr: netip.MustParseAddr("10.1.0.1"), DstAddr: netip.MustParseAddr("10.2.0.1"),
					SrcPort: uint16(k), DstPort: 53, Proto: 17, Packets: k, Bytes: 100 * k, StartTime: t0, EndTime: t0, Sampling: 1}
			}
			if err := exp.Export(t.Context(), recs); err != nil {
				exported <- err
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		exported <- nil
	}()
	for range 4 {
		time.Sleep(80 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		startCollector()
	}
	if err := <-exported; err != nil {
		t.Fatal(err)
	}
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	cmd = nil

	const total = batches * size
	if a, f := exp.Stats.AckedFlows.Load(), exp.Stats.FailedFlows.Load(); a != total || f != 0 {
		t.Fatalf("exporter: %d flows acknowledged, %d failed; want %d and 0", a, f, total)
	}
	out, err := os.Open(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	seen := map[uint64]int{}
	lines := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var f struct{ Packets uint64 }
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("output line %d: %v: %s", lines+1, err, sc.Bytes())
		}
		seen[f.Packets]++
		lines++
	}
	for k := uint64(1); k <= total; k++ {
		if seen[k] != 1 {
			t.Fatalf("flow %d printed %d times, want once (%d lines for %d flows)", k, seen[k], lines, total)
		}
	}
	if lines != total {
		t.Fatalf("%d lines printed, want %d", lines, total)
	}
	t.Logf("%d flows printed once each; %d streams opened, %d retries", total, exp.Stats.StreamsOpened.Load(), exp.Stats.Retries.Load())
}

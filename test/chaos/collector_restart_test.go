//go:build chaos

package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// The collector killed with SIGKILL and started again every 5 s for a
// minute, under traffic (docs/design/faults.md, "Acknowledged delivery
// over gRPC"): the agent binary watches one end of a veth pair and
// exports over gRPC (ExportAcked); the collector binary runs with
// --ack-state-file and prints JSON lines to one file that its successive
// processes append to, which outlives each of them: delivery is measured
// there. Known traffic: flows UDP flows, each sending one datagram per
// round. Every flow's packets in the output add up to what it sent and to
// what the veth's kernel counters say left; no record is printed twice;
// the agent counted no flow as lost (its queue's drops, its exporter's
// failed and rejected flows, all 0).
func TestCollectorRestart(t *testing.T) {
	netlab.Require(t)
	const (
		flows     = 40
		round     = 100 * time.Millisecond
		killEvery = 5 * time.Second
		duration  = time.Minute
	)
	dir := t.TempDir()
	p := agenttest.PairOf(t, "cra", "crb", "10.93.0.1", "10.93.0.2", "/24", netlab.Quiet)
	sink, err := netlab.UDPListen(p.B, p.IPB+":9000")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	go io.Copy(io.Discard, sink)

	grpcAddr, colMetrics, agentMetrics := testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t)
	out := filepath.Join(dir, "flows.jsonl")
	col := &restartingCollector{t: t, log: filepath.Join(dir, "collector.log"), out: out, metrics: colMetrics,
		args: []string{"--listen=" + grpcAddr, "--metrics-address=" + colMetrics, "--output=json", "--k8s-enrich=false",
			"--ack-state-file=" + filepath.Join(dir, "acks")}}
	col.start()
	t.Cleanup(col.kill)

	agentLog := filepath.Join(dir, "agent.log")
	alog, err := os.Create(agentLog)
	if err != nil {
		t.Fatal(err)
	}
	defer alog.Close()
	agent := exec.Command(bin["flowlens-agent"], "--netns="+p.A.Name, "--interfaces="+p.IfA, "--export=grpc",
		"--target="+grpcAddr, "--cache-active-timeout=1s", "--metrics-address="+agentMetrics, "--node-name=chaos-node")
	agent.Stdout, agent.Stderr = alog, alog
	if err := testkit.StartOwned(agent); err != nil {
		t.Fatal(err)
	}
	agentDone := false
	t.Cleanup(func() {
		if !agentDone {
			agent.Process.Kill()
			agent.Wait()
		}
		if t.Failed() {
			for _, f := range []string{agentLog, col.log} {
				b, _ := os.ReadFile(f)
				t.Logf("%s:\n%s", filepath.Base(f), crTail(b, 60))
			}
		}
	})
	crWaitFor(t, 30*time.Second, "the agent attached to "+p.IfA, func() bool {
		b, _ := os.ReadFile(agentLog)
		return strings.Contains(string(b), "attached interface="+p.IfA)
	})
	_, _, txBefore, _ := netlab.LinkStats(p.A, p.IfA)

	// Traffic: each round, one datagram per flow (source port 30000+i).
	sent := make([]uint64, flows)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var sendErr error
	go func() {
		defer wg.Done()
		tick := time.NewTicker(round)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for i := range flows {
				if err := netlab.UDPSend(p.A, fmt.Sprintf("%s:%d", p.IPA, 30000+i), p.IPB+":9000", []byte("chaos"), 1); err != nil {
					sendErr = err
					return
				}
				sent[i]++
			}
		}
	}()
	kills := 0
	for end := time.Now().Add(duration); time.Now().Before(end); {
		time.Sleep(killEvery)
		col.kill()
		kills++
		col.start()
	}
	close(stop)
	wg.Wait()
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	_, _, txAfter, _ := netlab.LinkStats(p.A, p.IfA)
	time.Sleep(2 * time.Second) // the last datagrams' period evicted and exported

	// What the agent counted as lost, before it stops.
	lost := map[string]float64{}
	for _, m := range []string{`flowlens_agent_export_dropped_flows_total{exporter="grpc"}`,
		`flowlens_agent_export_failed_flows_total{exporter="grpc"}`, `flowlens_agent_export_rejected_flows_total{exporter="grpc"}`} {
		lost[m] = crScrape(t, agentMetrics, m)
	}
	acked := crScrape(t, agentMetrics, `flowlens_agent_export_acked_flows_total{exporter="grpc"}`)
	agent.Process.Signal(syscall.SIGTERM)
	if err := agent.Wait(); err != nil {
		t.Fatalf("agent exited with %v", err)
	}
	agentDone = true
	dups := crScrape(t, colMetrics, "flowlens_collector_duplicate_batches_total") // this process's only
	col.stop()

	// Delivered: the collectors' output.
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]uint64, flows)
	lines := map[string]int{}
	records := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			SrcAddr string `json:"src_addr"`
			SrcPort int    `json:"src_port"`
			DstPort int    `json:"dst_port"`
			Packets uint64 `json:"packets"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("output line %d: %v: %.200s", records+1, err, sc.Bytes())
		}
		records++
		if r.SrcAddr != p.IPA || r.DstPort != 9000 || r.SrcPort < 30000 || r.SrcPort >= 30000+flows {
			continue // not the test's traffic
		}
		got[r.SrcPort-30000] += r.Packets
		if lines[sc.Text()]++; lines[sc.Text()] > 1 {
			t.Errorf("record printed twice: %.300s", sc.Text())
		}
	}
	var total, delivered uint64
	for i := range flows {
		total += sent[i]
		delivered += got[i]
		if got[i] != sent[i] {
			t.Errorf("flow %d (source port %d): %d packets delivered, %d sent", i, 30000+i, got[i], sent[i])
		}
	}
	if kernel := txAfter - txBefore; kernel != total {
		t.Errorf("the sender counted %d datagrams, the veth's kernel counters %d", total, kernel)
	}
	for m, v := range lost {
		if v != 0 {
			t.Errorf("%s = %v, want 0: nothing lost within the bound", m, v)
		}
	}
	clog, _ := os.ReadFile(col.log)
	resent := strings.Count(string(clog), "dropped a message the agent sent again")
	t.Logf("streams on which a collector dropped duplicates (applied before a kill, not acknowledged): %d", resent)
	t.Logf("%d collector kills in %v; %d flows, %d packets sent (kernel: %d), %d delivered in %d records; agent: %v flows acknowledged before its stop, lost %v; last collector dropped %v duplicate messages",
		kills, duration, flows, total, txAfter-txBefore, delivered, records, acked, lost, dups)
}

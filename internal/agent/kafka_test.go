package agent_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// collectorProc is a flowlens-collector process consuming the topic, its
// JSON output in a file.
type collectorProc struct {
	cmd      *exec.Cmd
	out, log string
}

// buildCollector builds cmd/flowlens-collector into a temp dir.
func buildCollector(t *testing.T) string {
	t.Helper()
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "flowlens-collector")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/flowlens-collector")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the collector: %v\n%s", err, out)
	}
	return bin
}

func startCollector(t *testing.T, bin, name string, args ...string) *collectorProc {
	t.Helper()
	dir := t.TempDir()
	c := &collectorProc{out: filepath.Join(dir, name+".json"), log: filepath.Join(dir, name+".log")}
	out, err := os.Create(c.out)
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command(bin, append([]string{"--listen=127.0.0.1:0", "--metrics-address=", "--output=json",
		"--k8s-enrich=false", "--log-level=debug"}, args...)...)
	c.cmd.Stdout, c.cmd.Stderr = out, logf
	if err := testkit.StartOwned(c.cmd); err != nil {
		t.Fatal(err)
	}
	out.Close()
	logf.Close()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
		if t.Failed() {
			l, _ := os.ReadFile(c.log)
			t.Logf("collector %s log:\n%s", name, l)
		}
	})
	return c
}

func (c *collectorProc) flows(t *testing.T) []agenttest.JSONFlow {
	t.Helper()
	b, err := os.ReadFile(c.out)
	if err != nil {
		t.Fatal(err)
	}
	// A line being written as we read is left for the next read.
	s := string(b)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[:i+1]
	} else {
		s = ""
	}
	return agenttest.ParseFlows(t, s)
}

// held is the number of partitions the collector said it holds last
// (its "partitions" log line), 0 before any.
func (c *collectorProc) held(t *testing.T) int {
	b, err := os.ReadFile(c.log)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.LastIndex(s, " held=")
	if i < 0 {
		return 0
	}
	n, _ := strconv.Atoi(strings.Fields(s[i+len(" held="):])[0])
	return n
}

// commitFailed reports whether the collector logged an offset commit
// that failed for good (its records are handled again: duplicates).
func (c *collectorProc) commitFailed(t *testing.T) bool {
	b, err := os.ReadFile(c.log)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), "offset commit failed: these records will be handled again")
}

// recordKey identifies one exported record: a flow split over evictions
// has records with different times; a record handled twice is the same.
func recordKey(f agenttest.JSONFlow) string {
	start, _ := time.Parse(time.RFC3339Nano, f.StartTime)
	end, _ := time.Parse(time.RFC3339Nano, f.EndTime)
	return fmt.Sprint(f.SrcAddr, f.DstAddr, f.SrcPort, f.DstPort, f.Proto, f.Packets, f.Bytes, start.UnixNano(), end.UnixNano())
}

// wholeKey is every field of a record the agent prints, times as instants.
func wholeKey(t *testing.T, f agenttest.JSONFlow) string {
	t.Helper()
	start, _ := time.Parse(time.RFC3339Nano, f.StartTime)
	end, _ := time.Parse(time.RFC3339Nano, f.EndTime)
	f.StartTime, f.EndTime = fmt.Sprint(start.UnixNano()), fmt.Sprint(end.UnixNano())
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestKafkaEndToEnd: a real agent exports to a real broker (topic of 4
// partitions), two collector processes consume it as one group.
//
//  1. Every flow's packets arrive exactly once in the sum of the two
//     collectors' outputs.
//  2. One collector is killed (SIGKILL) mid-stream: the other takes its
//     partitions over, nothing is lost; duplicates only of records the
//     killed one handled and had not committed.
//  3. The broker is stopped for a few seconds while flows are evicted, then
//     restarted: every record the agent evicted is either delivered or
//     counted in the agent's metrics as dropped or failed, exactly.
func TestKafkaEndToEnd(t *testing.T) {
	testkit.NeedRoot(t, "network namespaces, BPF")
	b := kafkatest.Start(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker log:\n%s", b.Log())
		}
	})
	const topic = "e2e-flows"
	b.CreateTopic(topic, 4)
	bin := buildCollector(t)
	// earliest: the new group must get every record of the (new) topic,
	// even one the agent produced before the group had its partitions.
	collArgs := []string{"--kafka-brokers=" + b.Addr, "--kafka-topic=" + topic, "--kafka-group=e2e", "--kafka-session-timeout=6s",
		"--kafka-start-offset=earliest"}
	c1 := startCollector(t, bin, "c1", collArgs...)
	c2 := startCollector(t, bin, "c2", collArgs...)

	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--export=stdout,kafka", "--cache-active-timeout=200ms",
		"--kafka-brokers="+b.Addr, "--kafka-topic="+topic, "--kafka-batch-flows=3", "--kafka-linger=5ms",
		"--export-buffer=2", "--node-name=node-kafka")
	const per = 5
	port := 20000
	send := func(n int) {
		t.Helper()
		for range n {
			if err := netlab.UDPSend(p.A, fmt.Sprintf("%s:%d", p.IPA, port), p.IPB+":9000", []byte("kafka"), per); err != nil {
				t.Fatal(err)
			}
			port++
		}
	}
	// waitFor waits until cond holds for what the collectors printed.
	waitFor := func(what string, cond func(all []agenttest.JSONFlow) bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			all := append(c1.flows(t), c2.flows(t)...)
			if cond(all) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 90s (%d records printed)", what, len(all))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	packetsOf := func(all []agenttest.JSONFlow, from, to int) uint64 {
		seen := map[string]bool{}
		var n uint64
		for _, f := range all {
			if f.SrcAddr == p.IPA && int(f.SrcPort) >= from && int(f.SrcPort) < to && !seen[recordKey(f)] {
				seen[recordKey(f)] = true
				n += f.Packets
			}
		}
		return n
	}

	// 1. Both collectors share the flows, once the group gave each two of
	// the four partitions (a member that joins late would find them read).
	for deadline := time.Now().Add(90 * time.Second); c1.held(t) != 2 || c2.held(t) != 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the group did not split the partitions in 90s: c1 holds %d, c2 %d", c1.held(t), c2.held(t))
		}
	}
	send(40)
	waitFor("phase 1 delivered", func(all []agenttest.JSONFlow) bool { return packetsOf(all, 20000, 20040) == 40*per })
	if len(c1.flows(t)) == 0 || len(c2.flows(t)) == 0 {
		t.Errorf("one collector got nothing: c1 %d records, c2 %d (4 partitions, 2 members)", len(c1.flows(t)), len(c2.flows(t)))
	}

	// 2. Kill c1 mid-stream: flows keep coming, c2 takes its partitions.
	c1Before := len(c1.flows(t))
	send(20)
	if err := c1.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	c1.cmd.Wait()
	send(20)
	waitFor("phase 2 delivered after the kill", func(all []agenttest.JSONFlow) bool { return packetsOf(all, 20000, 20080) == 80*per })
	t.Logf("c1 printed %d records before the kill, %d in all", c1Before, len(c1.flows(t)))

	// 3. The broker goes down for a few seconds while flows are evicted.
	b.Stop()
	for range 8 {
		send(3)
		time.Sleep(250 * time.Millisecond) // an eviction per burst: batches pile up in the queue
	}
	b.Restart()
	// The flows evicted meanwhile were queued (or dropped, counted); wait
	// until the exporter caught up before the last flows.
	var q *exporter.Queue
	for _, x := range h.A.Queues {
		if x.Name() == "kafka" {
			q = x
		}
	}
	st := h.A.KafkaStats()
	ackedAtRestart := st.AckedFlows.Load()
	for deadline := time.Now().Add(90 * time.Second); q.Len() > 0 || st.AckedFlows.Load() == ackedAtRestart; {
		if time.Now().After(deadline) {
			t.Fatalf("the kafka exporter did not catch up after the broker restart: %d batches queued", q.Len())
		}
		time.Sleep(100 * time.Millisecond)
	}
	send(20)
	last := port
	waitFor("phase 3 delivered", func(all []agenttest.JSONFlow) bool { return packetsOf(all, last-20, last) == 20*per })

	local := h.Stop() // flushes the last flows, acked before it returns
	dropped, failed, acked := q.Stats.DroppedFlows.Load()+q.Stats.ShutdownFlows.Load(), st.FailedFlows.Load(), st.AckedFlows.Load()

	// Every record the agent evicted (its stdout) was acked by the broker
	// or counted as dropped (for backpressure, or left at shutdown) or
	// failed.
	if uint64(len(local)) != acked+dropped+failed {
		t.Fatalf("agent evicted %d records; acked %d + dropped %d + failed %d = %d", len(local), acked, dropped, failed, acked+dropped+failed)
	}
	// Every acked record reaches a collector. Records are compared whole
	// (the drop hook's partial records can be alike): a record printed more
	// often than the agent evicted it is a duplicate, allowed only if the
	// killed collector printed it; one printed less often was dropped or
	// failed, exactly as many as counted.
	waitFor("every acked record printed", func(all []agenttest.JSONFlow) bool { return uint64(len(all)) >= acked })
	localN, collN, in1 := map[string]int{}, map[string]int{}, map[string]bool{}
	for _, f := range local {
		localN[wholeKey(t, f)]++
	}
	for _, f := range c1.flows(t) {
		collN[wholeKey(t, f)]++
		in1[wholeKey(t, f)] = true
	}
	for _, f := range c2.flows(t) {
		collN[wholeKey(t, f)]++
	}
	var dups, missing, delivered int
	for k, n := range collN {
		if localN[k] == 0 {
			t.Errorf("a collector printed a record the agent did not evict: %s", k)
		}
		if extra := n - localN[k]; extra > 0 {
			dups += extra
			if !in1[k] && !c2.commitFailed(t) {
				t.Errorf("record printed %d times, evicted %d, neither by the killed collector nor after a failed commit: %s", n, localN[k], k)
			}
		}
		delivered += min(n, localN[k])
	}
	for k, n := range localN {
		if d := n - collN[k]; d > 0 {
			missing += d
		}
	}
	if uint64(delivered) != acked || uint64(missing) != dropped+failed {
		t.Errorf("delivered %d (acked %d), not delivered %d (dropped %d + failed %d)", delivered, acked, missing, dropped, failed)
	}
	t.Logf("evicted %d records: acked %d, dropped %d, failed %d; %d duplicates (across the kill or a failed commit)", len(local), acked, dropped, failed, dups)
}

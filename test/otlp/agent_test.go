package otlp_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// jsonKey is what identifies a flow and its counts, in the agent's JSON
// output (agenttest.JSONFlow) and at the receiver alike.
type jsonKey struct {
	Src, Dst     string
	Sport, Dport uint16
	Proto        uint8
	Packets      uint64
	Bytes        uint64
}

// The real agent, attached to a veth pair between two namespaces, exports
// to stdout and OTLP at once: the Collector's receiver gets exactly the
// flows the agent printed, with the same keys, packets and bytes, and the
// UDP test flows' packets and L2 bytes are what was sent.
func TestAgentToCollector(t *testing.T) {
	l := newLab(t)
	sink := new(consumertest.LogsSink)
	rec := startReceiver(t, "grpc", testkit.FreeAddr(t), nil, sink)
	ag := l.startAgent(t, "--otlp-endpoint="+rec.addr, "--otlp-batch-flows=16")

	const flows, per, payload = 40, 5, 100
	l.udpFlows(t, 30000, flows, per, payload)
	l.Transfer(t, 9001, 300_000)
	local := ag.stop() // the last flows are exported before Run returns
	got := received(t, sink, "node-otlp")
	t.Logf("agent printed %d flows, the receiver decoded %d in %d requests", len(local), len(got), len(sink.AllLogs()))
	if len(got) != len(local) {
		t.Fatalf("receiver has %d flows, the agent printed %d", len(got), len(local))
	}
	want := map[jsonKey]int{}
	for _, k := range local {
		want[k]++
	}
	var udpPackets, udpBytes, tcpPackets uint64
	for _, r := range got {
		k := jsonKey{r.SrcAddr.String(), r.DstAddr.String(), r.SrcPort, r.DstPort, r.Proto, r.Packets, r.Bytes}
		if want[k] == 0 {
			t.Errorf("OTLP flow %+v is not among the agent's", k)
		}
		want[k]--
		if r.SrcAddr == netip.MustParseAddr(ipA) && r.DstPort == 9000 && r.Proto == 17 {
			udpPackets += r.Packets
			udpBytes += r.Bytes
		}
		if r.Proto == 6 && (r.DstPort == 9001 || r.SrcPort == 9001) {
			tcpPackets += r.Packets
		}
	}
	if udpPackets != flows*per {
		t.Errorf("receiver has %d packets of the UDP test flows, want %d sent", udpPackets, flows*per)
	}
	if frame := uint64(14 + 20 + 8 + payload); udpBytes != flows*per*frame {
		t.Errorf("receiver has %d bytes of the UDP test flows, want %d (%d frames of %d bytes)", udpBytes, flows*per*frame, flows*per, frame)
	}
	if tcpPackets == 0 {
		t.Error("no TCP packets at the receiver")
	}
}

// The receiver is down while the agent exports: the otlp queue drops its
// oldest batches (counted), the other exporter (stdout) loses nothing;
// once the receiver is up the rest is delivered. Every flow the agent
// evicted (printed) is delivered or counted: delivered + dropped + rejected
// + failed = printed, the counts read from the agent's own metrics.
func TestAgentReceiverDownThenBack(t *testing.T) {
	l := newLab(t)
	addr := testkit.FreeAddr(t)
	ag := l.startAgent(t, "--otlp-endpoint="+addr, "--export-buffer=2", "--metrics-address=127.0.0.1:0")
	var q *exporter.Queue
	for _, x := range ag.A.Queues {
		if x.Name() == "otlp" {
			q = x
		}
	}
	// Traffic in rounds until the queue, full, has dropped a batch.
	port := 30000
	for deadline := time.Now().Add(60 * time.Second); q.Stats.DroppedFlows.Load() == 0; port += 10 {
		if time.Now().After(deadline) {
			t.Fatal("the otlp queue dropped nothing while the receiver was down")
		}
		l.udpFlows(t, port, 10, 3, 50)
		time.Sleep(50 * time.Millisecond) // spread the rounds over evictions
	}
	if m := ag.metric(t, "flowlens_agent_export_retries_total"); m == 0 {
		t.Error("no retries counted while the receiver was down")
	}

	sink := new(consumertest.LogsSink)
	startReceiver(t, "grpc", addr, nil, sink)
	l.udpFlows(t, port, 10, 3, 50) // and some more once it is back
	for deadline := time.Now().Add(60 * time.Second); q.Len() > 0 || ag.metric(t, "flowlens_agent_export_connected") != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the otlp queue still holds %d batches", q.Len())
		}
	}
	rejected, failed := ag.metric(t, "flowlens_agent_export_rejected_flows_total"), ag.metric(t, "flowlens_agent_export_failed_flows_total")
	local := ag.stop()
	got := received(t, sink, "node-otlp")
	dropped := q.Stats.DroppedFlows.Load()
	for _, x := range ag.A.Queues {
		if x.Name() == "stdout" && x.Stats.DroppedFlows.Load() != 0 {
			t.Errorf("stdout dropped %d flows: the otlp outage spilled over", x.Stats.DroppedFlows.Load())
		}
	}
	t.Logf("agent printed %d flows: the receiver got %d, the otlp queue dropped %d, rejected %d, failed %d",
		len(local), len(got), dropped, rejected, failed)
	if uint64(len(got))+dropped+rejected+failed != uint64(len(local)) {
		t.Errorf("delivered %d + dropped %d + rejected %d + failed %d != %d evicted", len(got), dropped, rejected, failed, len(local))
	}
	if len(got) == 0 {
		t.Error("nothing delivered once the receiver was back")
	}
}

// lab is two namespaces joined by a veth pair, quiet so that only the
// test's packets flow (agenttest.Pair), with a UDP listener on B:9000.
type lab struct{ *agenttest.Pair }

const ipA, ipB = "10.98.0.1", "10.98.0.2"

func newLab(t *testing.T) *lab {
	netlab.Require(t)
	// otlp- names: testnet makes them unique, the prefix says whose they are.
	l := &lab{agenttest.PairOf(t, "otlp-a", "otlp-b", ipA, ipB, "/24", netlab.Quiet)}
	agenttest.MustListen(t, l.B, ipB+":9000")
	return l
}

// udpFlows sends n flows of per packets of payload bytes from a (source
// ports from port up) to b:9000.
func (l *lab) udpFlows(t *testing.T, port, n, per, payload int) {
	t.Helper()
	for i := range n {
		if err := netlab.UDPSend(l.A, fmt.Sprintf("%s:%d", ipA, port+i), ipB+":9000", make([]byte, payload), per); err != nil {
			t.Fatal(err)
		}
	}
}

// runningAgent is the real agent, run in this process by agenttest.
type runningAgent struct{ *agenttest.Harness }

// startAgent runs the agent on the lab's namespaces, exporting to stdout
// and OTLP, and waits until it has attached to both veths.
func (l *lab) startAgent(t *testing.T, args ...string) *runningAgent {
	t.Helper()
	return &runningAgent{agenttest.Start(t, 2, agent.Options{}, append([]string{l.NetnsArg(), "--export=stdout,otlp",
		"--interfaces=" + l.IfA + "," + l.IfB, "--cache-active-timeout=200ms", "--node-name=node-otlp"}, args...)...)}
}

// stop stops the agent (it exports the flows left in the kernel first) and
// returns every flow it printed, keyed.
func (r *runningAgent) stop() []jsonKey {
	var local []jsonKey
	for _, f := range r.Stop() {
		local = append(local, jsonKey{f.SrcAddr, f.DstAddr, f.SrcPort, f.DstPort, f.Proto, f.Packets, f.Bytes})
	}
	return local
}

// metric reads one of the agent's metrics for exporter="otlp" from its
// /metrics endpoint.
func (r *runningAgent) metric(t *testing.T, name string) uint64 {
	t.Helper()
	resp, err := http.Get("http://" + r.A.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	prefix := name + `{exporter="otlp"} `
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			return uint64(f)
		}
	}
	t.Fatalf("no %s in the agent's metrics", prefix)
	return 0
}

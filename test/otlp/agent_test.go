package otlp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// jsonKey is what identifies a flow and its counts in the JSON output.
type jsonKey struct {
	Src     string `json:"src_addr"`
	Dst     string `json:"dst_addr"`
	Sport   uint16 `json:"src_port"`
	Dport   uint16 `json:"dst_port"`
	Proto   uint8  `json:"proto"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// The real agent, attached to a veth pair between two namespaces, exports
// to stdout and OTLP at once: the Collector's receiver gets exactly the
// flows the agent printed, with the same keys, packets and bytes, and the
// UDP test flows' packets and L2 bytes are what was sent.
func TestAgentToCollector(t *testing.T) {
	l := newLab(t)
	sink := new(consumertest.LogsSink)
	rec := startReceiver(t, "grpc", freeAddr(t), nil, sink)
	ag := l.startAgent(t, "--otlp-endpoint="+rec.addr, "--otlp-batch-flows=16")

	const flows, per, payload = 40, 5, 100
	l.udpFlows(t, 30000, flows, per, payload)
	tcpTransfer(t, l.a, l.b, ipB+":9001", 300_000)
	local := ag.stop(t) // the last flows are exported before Run returns
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
	addr := freeAddr(t)
	ag := l.startAgent(t, "--otlp-endpoint="+addr, "--export-buffer=2", "--metrics-address=127.0.0.1:0")
	var q *exporter.Queue
	for _, x := range ag.Queues {
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
	local := ag.stop(t)
	got := received(t, sink, "node-otlp")
	dropped := q.Stats.DroppedFlows.Load()
	for _, x := range ag.Queues {
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
// test's packets flow, with a UDP listener on b:9000.
type lab struct{ a, b *netlab.Netns }

const ipA, ipB = "10.98.0.1", "10.98.0.2"

func newLab(t *testing.T) *lab {
	netlab.Require(t)
	// otlp- names: testnet makes them unique, the prefix says whose they are.
	l := &lab{a: netlab.NewNetns(t, "otlp-a"), b: netlab.NewNetns(t, "otlp-b")}
	netlab.Quiet(t, l.a)
	netlab.Quiet(t, l.b)
	la, lb := netlab.Veth(t, l.a, "otlp-va", l.b, "otlp-vb")
	netlab.AddAddr(t, l.a, "otlp-va", ipA+"/24")
	netlab.AddAddr(t, l.b, "otlp-vb", ipB+"/24")
	netlab.Neigh(t, l.a, "otlp-va", ipB, lb.Attrs().HardwareAddr)
	netlab.Neigh(t, l.b, "otlp-vb", ipA, la.Attrs().HardwareAddr)
	ln, err := netlab.UDPListen(l.b, ipB+":9000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return l
}

// udpFlows sends n flows of per packets of payload bytes from a (source
// ports from port up) to b:9000.
func (l *lab) udpFlows(t *testing.T, port, n, per, payload int) {
	t.Helper()
	for i := range n {
		if err := netlab.UDPSend(l.a, fmt.Sprintf("%s:%d", ipA, port+i), ipB+":9000", make([]byte, payload), per); err != nil {
			t.Fatal(err)
		}
	}
}

// runningAgent is the real agent, run in this process.
type runningAgent struct {
	*agent.Agent
	out    *testkit.SyncBuffer
	cancel context.CancelFunc
	done   chan error
}

// startAgent runs the agent on the lab's namespaces, exporting to stdout
// and OTLP, and waits until it has attached to both veths.
func (l *lab) startAgent(t *testing.T, args ...string) *runningAgent {
	t.Helper()
	cfg, err := config.Load(append([]string{"--metrics-address=", "--netns=" + l.a.Name + "," + l.b.Name, "--export=stdout,otlp",
		"--interfaces=otlp-va,otlp-vb", "--cache-active-timeout=200ms", "--node-name=node-otlp"}, args...), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := &testkit.SyncBuffer{}
	a, err := agent.New(cfg, agent.Options{Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningAgent{Agent: a, out: out, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	for deadline := time.Now().Add(10 * time.Second); a.DP.Attached() < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("agent attached to %d interfaces, want 2", a.DP.Attached())
		}
	}
	return r
}

// stop stops the agent (it exports the flows left in the kernel first) and
// returns every flow it printed.
func (r *runningAgent) stop(t *testing.T) []jsonKey {
	t.Helper()
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("agent: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("agent did not stop in 60 s")
		}
	}
	var local []jsonKey
	sc := bufio.NewScanner(strings.NewReader(r.out.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var k jsonKey
		if err := json.Unmarshal(sc.Bytes(), &k); err != nil {
			t.Fatalf("stdout line %q: %v", sc.Text(), err)
		}
		local = append(local, k)
	}
	return local
}

// metric reads one of the agent's metrics for exporter="otlp" from its
// /metrics endpoint.
func (r *runningAgent) metric(t *testing.T, name string) uint64 {
	t.Helper()
	resp, err := http.Get("http://" + r.MetricsAddr() + "/metrics")
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

// tcpTransfer sends size bytes from namespace a to a listener at addr in b
// and waits until all arrived.
func tcpTransfer(t *testing.T, a, b *netlab.Netns, addr string, size int) {
	t.Helper()
	var ln net.Listener
	if err := b.Do(func() (err error) { ln, err = net.Listen("tcp4", addr); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		n := 0
		buf := make([]byte, 64<<10)
		for {
			k, err := c.Read(buf)
			n += k
			if err != nil {
				got <- n
				return
			}
		}
	}()
	if err := a.Do(func() error {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			return err
		}
		if _, err := c.Write(make([]byte, size)); err != nil {
			return err
		}
		return c.Close()
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != size {
			t.Fatalf("received %d bytes, want %d", n, size)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("transfer did not finish in 60 s")
	}
}

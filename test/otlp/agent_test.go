package otlp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/config"
	"github.com/flowlens/flowlens/internal/testnet"
)

// syncBuffer is the agent's stdout, written by its exporter goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

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
	testnet.Require(t)
	// The lab: namespaces otlp-a and otlp-b (testnet makes the names
	// unique), joined by a veth pair, quiet so only the test's packets flow.
	a, b := testnet.NewNetns(t, "otlp-a"), testnet.NewNetns(t, "otlp-b")
	testnet.Quiet(t, a)
	testnet.Quiet(t, b)
	la, lb := testnet.Veth(t, a, "otlp-va", b, "otlp-vb")
	const ipA, ipB = "10.98.0.1", "10.98.0.2"
	testnet.AddAddr(t, a, "otlp-va", ipA+"/24")
	testnet.AddAddr(t, b, "otlp-vb", ipB+"/24")
	testnet.Neigh(t, a, "otlp-va", ipB, lb.Attrs().HardwareAddr)
	testnet.Neigh(t, b, "otlp-vb", ipA, la.Attrs().HardwareAddr)
	ln, err := testnet.UDPListen(b, ipB+":9000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	sink := new(consumertest.LogsSink)
	rec := startReceiver(t, "grpc", freeAddr(t), nil, sink)

	cfg, err := config.Load([]string{"--metrics-address=", "--netns=" + a.Name + "," + b.Name, "--export=stdout,otlp",
		"--otlp-endpoint=" + rec.addr, "--otlp-batch-flows=16", "--cache-active-timeout=200ms", "--node-name=node-otlp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	ag, err := agent.New(cfg, agent.Options{Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	stop := func() {
		if cancel == nil {
			return
		}
		cancel()
		cancel = nil
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("agent did not stop in 30 s")
		}
	}
	defer stop()
	for deadline := time.Now().Add(10 * time.Second); ag.DP.Attached() < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("agent attached to %d interfaces, want 2", ag.DP.Attached())
		}
	}

	const flows, per, payload = 40, 5, 100
	for i := range flows {
		if err := testnet.UDPSend(a, fmt.Sprintf("%s:%d", ipA, 30000+i), ipB+":9000", make([]byte, payload), per); err != nil {
			t.Fatal(err)
		}
	}
	tcpTransfer(t, a, b, ipB+":9001", 300_000)
	stop() // the last flows are exported before Run returns

	var local []jsonKey
	sc := bufio.NewScanner(bytes.NewReader(out.b.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var k jsonKey
		if err := json.Unmarshal(sc.Bytes(), &k); err != nil {
			t.Fatalf("stdout line %q: %v", sc.Text(), err)
		}
		local = append(local, k)
	}
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

// tcpTransfer sends size bytes from namespace a to a listener at addr in b
// and waits until all arrived.
func tcpTransfer(t *testing.T, a, b *testnet.Netns, addr string, size int) {
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

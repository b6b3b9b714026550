package main

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	grpcexp "github.com/flowlens/flowlens/internal/exporter/grpc"
	"github.com/flowlens/flowlens/pkg/flow"
)

// syncBuffer is an io.Writer tests can read while the collector writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := strings.Split(strings.TrimRight(s.b.String(), "\n"), "\n")
	if len(out) == 1 && out[0] == "" {
		return nil
	}
	return out
}

func records() []flow.Record {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
	return []flow.Record{
		{SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("10.0.0.53"), SrcPort: 40000, DstPort: 53, Proto: 17,
			Bytes: 120, Packets: 2, StartTime: t0, EndTime: t0.Add(time.Millisecond), Sampling: 1, EthType: 0x800,
			Interfaces: []flow.Interface{{Name: "veth1", Ifindex: 9, Netns: "pod-a", Direction: flow.DirIngress}, {Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirEgress}}},
		{SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("192.168.7.7"), SrcPort: 40001, DstPort: 443, Proto: 6,
			Bytes: 9000, Packets: 10, StartTime: t0, EndTime: t0.Add(time.Second), Sampling: 1, RTT: 1500 * time.Microsecond,
			DropPackets: 1, DropBytes: 60, DropCause: "NETFILTER_DROP",
			Interfaces: []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirBoth}}},
		{SrcAddr: netip.MustParseAddr("fd00::1"), DstAddr: netip.MustParseAddr("fd00::2"), Proto: 58, IcmpType: 128,
			Bytes: 104, Packets: 1, StartTime: t0, EndTime: t0, Sampling: 1},
	}
}

// notInCluster is the in-cluster configuration outside a cluster.
func notInCluster() (*rest.Config, error) { return nil, rest.ErrNotInCluster }

// start runs the collector with args on free loopback ports (flows and
// metrics), as outside a cluster.
func start(t *testing.T, args ...string) (addr string, out *syncBuffer, stop func() int) {
	t.Helper()
	a, out, stop := startFull(t, args...)
	return a.GRPC.String(), out, stop
}

func startFull(t *testing.T, args ...string) (a addrs, out *syncBuffer, stop func() int) {
	t.Helper()
	out = &syncBuffer{}
	errOut := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan addrs, 1)
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"--listen", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0"}, args...), out, errOut,
			&env{ready: func(a addrs) { addrCh <- a }, inCluster: notInCluster})
	}()
	select {
	case a = <-addrCh:
	case c := <-code:
		t.Fatalf("collector exited with %d: %s", c, errOut.b.String())
	}
	var once sync.Once
	res := 0
	stop = func() int {
		once.Do(func() { cancel(); res = <-code })
		return res
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("collector log:\n%s", errOut.b.String())
		}
	})
	return a, out, stop
}

func send(t *testing.T, addr string, recs []flow.Record) {
	t.Helper()
	e, err := grpcexp.New(grpcexp.Config{Target: addr, NodeName: "node-7", AgentIP: netip.MustParseAddr("192.0.2.1")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Export(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil { // waits for the collector's summary: all handled
		t.Fatal(err)
	}
}

func TestJSONLinesAreTheAgentsPlusIdentity(t *testing.T) {
	addr, out, stop := start(t)
	recs := records()
	send(t, addr, recs)
	if code := stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	lines := out.lines()
	if len(lines) != len(recs) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(recs), strings.Join(lines, "\n"))
	}
	for i := range recs {
		agent := string(recs[i].AppendJSON(nil))
		want := agent[:len(agent)-1] + `,"node_name":"node-7","agent_ip":"192.0.2.1"}`
		if lines[i] != want {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], want)
		}
	}
}

func TestTableAndFilters(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // substrings of the expected rows, in order
	}{
		{nil, []string{
			"10.0.0.1:40000        → 10.0.0.53:53          udp                   120        2  pod-a/veth1(in),eth0(out)    -                -          node-7",
			"10.0.0.1:40001        → 192.168.7.7:443       tcp                  9000       10  eth0(both)                   1p/60B NETFILTER_DROP 1.5ms      node-7",
			"fd00::1               → fd00::2               icmpv6:128/0          104        1  -                            -                -          node-7",
		}},
		{[]string{"--proto", "udp"}, []string{"10.0.0.53:53"}},
		{[]string{"--port", "443,53"}, []string{"10.0.0.53:53", "192.168.7.7:443"}},
		{[]string{"--ip", "192.168.0.0/16"}, []string{"192.168.7.7:443"}},
		{[]string{"--ip", "fd00::2", "--proto", "58"}, []string{"fd00::2"}},
		{[]string{"--ip", "10.0.0.1", "--proto", "tcp", "--port", "53"}, nil},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			addr, out, stop := start(t, append([]string{"--output", "table"}, tc.args...)...)
			send(t, addr, records())
			stop()
			lines := out.lines()
			if len(tc.want) == 0 {
				if len(lines) != 0 {
					t.Fatalf("want no output, got:\n%s", strings.Join(lines, "\n"))
				}
				return
			}
			if len(lines) != 1+len(tc.want) || !strings.HasPrefix(lines[0], "SRC") {
				t.Fatalf("want a header and %d rows, got:\n%s", len(tc.want), strings.Join(lines, "\n"))
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[1+i], w) {
					t.Errorf("row %d:\n got %q\nwant it to contain %q", i, lines[1+i], w)
				}
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--output", "xml"}, {"--ip", "10.0.0.300"}, {"--port", "70000"}, {"--proto", "bogus"},
		{"--tls-cert", "x"}, {"--tls-client-ca", "ca.pem"}, {"extra"},
	} {
		var errOut bytes.Buffer
		if code := run(context.Background(), args, &bytes.Buffer{}, &errOut, nil); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errOut.String())
		}
	}
}

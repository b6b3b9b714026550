package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The history's bounds, against the real collector binary (built once
// from this tree) with raw gRPC clients and the agent's real exporter.

func queryCollectorBinary(t *testing.T) string {
	t.Helper()
	return testkit.Build(t, "./cmd/flowlens-collector")
}

// queryCollector is a running collector binary.
type queryCollector struct {
	cmd           *exec.Cmd
	grpc, metrics string
	log           *collectortest.SyncBuffer
}

func startQueryCollector(t *testing.T, args ...string) *queryCollector {
	t.Helper()
	c := &queryCollector{grpc: testkit.FreeAddr(t), metrics: testkit.FreeAddr(t), log: &collectortest.SyncBuffer{}}
	// Listen on every address: the followers come from several loopback
	// addresses (clients of their own).
	_, port, _ := net.SplitHostPort(c.grpc)
	// Off loopback, the collector wants TLS or --insecure-plaintext.
	c.cmd = exec.Command(queryCollectorBinary(t), append([]string{"--listen=0.0.0.0:" + port, "--insecure-plaintext", "--metrics-address=" + c.metrics,
		"--output=none", "--k8s-enrich=false"}, args...)...)
	c.cmd.Stderr = c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed when the process ended, with waitErr set: both the
	// readiness loop and the cleanup wait on it.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = c.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		c.cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			c.cmd.Process.Kill()
			<-exited
			t.Errorf("collector did not stop in 15s")
		}
		if t.Failed() {
			t.Logf("collector log:\n%s", c.log.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r, err := http.Get("http://" + c.metrics + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return c
			}
		}
		select {
		case <-exited:
			t.Fatalf("collector exited: %v\n%s", waitErr, c.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector not ready after 20s:\n%s", c.log.String())
		}
	}
}

// memKB reads a field (VmRSS, VmHWM) of the collector's /proc status.
func (c *queryCollector) memKB(t *testing.T, field string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc status", field)
	return 0
}

// metric reads one sample of the collector's metrics: name with its
// labels as exposed ("m" or `m{reason="x"}`).
func (c *queryCollector) metric(t *testing.T, sample string) float64 {
	t.Helper()
	r, err := http.Get("http://" + c.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no sample %s", sample)
	return 0
}

func historyClient(t *testing.T, addr, fromIP string) flowv1.FlowHistoryClient {
	t.Helper()
	d := net.Dialer{}
	if fromIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(fromIP)}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return flowv1.NewFlowHistoryClient(conn)
}

// exportFlows sends n flows in batches of 1000 with the agent's real
// exporter and returns once the collector acknowledged them all.
func exportFlows(t *testing.T, addr string, first, n int) {
	t.Helper()
	e, err := grpcexp.New(grpcexp.Config{Target: addr, NodeName: "node-a", AgentIP: netip.MustParseAddr("192.0.2.1")})
	if err != nil {
		t.Error(err)
		return
	}
	t0 := time.Now()
	for sent := 0; sent < n; sent += 1000 {
		recs := make([]flow.Record, min(1000, n-sent))
		for i := range recs {
			k := first + sent + i
			recs[i] = flow.Record{SrcAddr: netip.AddrFrom4([4]byte{10, 0, byte(k >> 8), byte(k)}), DstAddr: netip.MustParseAddr("10.1.0.1"),
				SrcPort: uint16(k), DstPort: 443, Proto: 6, Bytes: 100, Packets: 1, Sampling: 1, StartTime: t0, EndTime: t0,
				Interfaces: []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirEgress}}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := e.Export(ctx, recs)
		cancel()
		if err != nil {
			t.Errorf("export: %v", err)
			return
		}
	}
	if err := e.Close(); err != nil {
		t.Errorf("exporter close: %v", err)
	}
}

// A GetFlows of two million ports is refused before it is decoded: a clear
// error within a second, and the collector's peak RSS stays below twice
// its idle RSS plus its history; so is one of a million ports that fits
// the size bound (by its terms).
func TestBinaryGetFlowsTwoMillionPorts(t *testing.T) {
	// The request (5.5 MB) is under this message limit, so that the
	// history's own bound refuses it; under the default 4 MiB limit gRPC
	// refuses it earlier still, from its length.
	c := startQueryCollector(t, "--max-message-bytes=8388608")
	time.Sleep(200 * time.Millisecond)
	idle := c.memKB(t, "VmRSS")
	exportFlows(t, c.grpc, 0, 20_000)
	hist := max(c.memKB(t, "VmRSS")-idle, 0)

	ports := make([]uint32, 2_000_000)
	for i := range ports {
		ports[i] = uint32(i % 65536)
	}
	client := historyClient(t, c.grpc, "")
	for try := range 3 {
		start := time.Now()
		st, err := client.GetFlows(context.Background(), &flowv1.GetFlowsRequest{Filters: []*flowv1.FlowFilter{{Port: ports}}})
		if err == nil {
			_, err = st.Recv()
		}
		took := time.Since(start)
		want := "GetFlows: request of 5488138 bytes, max 1048576 (--history-max-request-bytes)"
		if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != want || took > time.Second {
			t.Fatalf("try %d: %v after %v, want ResourceExhausted %q within a second", try, err, took, want)
		}
		t.Logf("try %d: refused in %v", try, took)
	}
	// A million one-byte ports fit in 1 MiB: refused by their count, on
	// the wire, before decoding.
	small := make([]uint32, 1_000_000)
	for i := range small {
		small[i] = uint32(i % 128)
	}
	start := time.Now()
	st, err := client.GetFlows(context.Background(), &flowv1.GetFlowsRequest{Filters: []*flowv1.FlowFilter{{Port: small}}})
	if err == nil {
		_, err = st.Recv()
	}
	want := "GetFlows: filter of 1000001 terms, max 1024 (--history-max-filter-terms): each filter and each value in one counts one"
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want || time.Since(start) > time.Second {
		t.Fatalf("a million ports: %v after %v, want InvalidArgument %q within a second", err, time.Since(start), want)
	}
	hwm := c.memKB(t, "VmHWM")
	t.Logf("idle RSS %d KiB, history %d KiB, peak %d KiB", idle, hist, hwm)
	if hwm >= 2*idle+hist {
		t.Errorf("peak RSS %d KiB, not below twice idle (%d KiB) plus history (%d KiB)", hwm, idle, hist)
	}
	if got := c.metric(t, `flowlens_collector_history_refused_requests_total{reason="request_bytes"}`); got != 3 {
		t.Errorf("refused request_bytes: %v, want 3", got)
	}
	// Still serving: the history is all there.
	st, err = client.GetFlows(context.Background(), &flowv1.GetFlowsRequest{Filters: []*flowv1.FlowFilter{{FromPort: []uint32{7, 8}}}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
		n++
	}
	if n != 2 {
		t.Errorf("query after the refusals: %d flows, want 2", n)
	}
}

// Ten thousand followers from 40 client addresses while an agent
// exports: 1024 (--history-max-followers) are served, every other one is
// refused with ResourceExhausted naming its bound, and the collector
// receives every flow.
func TestBinaryTenThousandFollowers(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 streams")
	}
	c := startQueryCollector(t)
	time.Sleep(200 * time.Millisecond)
	idle := c.memKB(t, "VmRSS")
	const clients, perClient, flows = 40, 250, 100_000
	// A full history first (--history-size 100000): its memory as the
	// collector holds it, then as many flows again during the followers.
	exportFlows(t, c.grpc, 0, flows)
	hist := max(c.memKB(t, "VmRSS")-idle, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	exported := make(chan struct{})
	go func() { defer close(exported); exportFlows(t, c.grpc, flows, flows) }()

	var served, refusedAll, refusedClient atomic.Int64
	var wrong sync.Map
	var wg sync.WaitGroup
	start := time.Now()
	for i := range clients {
		hc := historyClient(t, c.grpc, fmt.Sprintf("127.0.1.%d", i+1))
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := hc.GetFlows(ctx, &flowv1.GetFlowsRequest{Follow: true, SkipHistory: true, Filters: []*flowv1.FlowFilter{{FromPort: []uint32{1}}}})
				if err == nil {
					var r *flowv1.GetFlowsResponse
					if r, err = st.Recv(); err == nil && r.GetHistoryEnd() {
						served.Add(1)
						return // keep following until the test ends
					}
				}
				msg := status.Convert(err).Message()
				switch {
				case status.Code(err) != codes.ResourceExhausted:
					wrong.Store(msg, err)
				case msg == "GetFlows: 1024 followers already, max 1024 (--history-max-followers)":
					refusedAll.Add(1)
				case strings.HasPrefix(msg, "GetFlows: 64 followers from 127.0.1.") && strings.HasSuffix(msg, " already, max 64 per client (--history-max-followers-per-client)"):
					refusedClient.Add(1)
				default:
					wrong.Store(msg, err)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d followers answered in %v: %d served, %d refused (all), %d refused (per client)",
		clients*perClient, time.Since(start), served.Load(), refusedAll.Load(), refusedClient.Load())
	wrong.Range(func(k, v any) bool { t.Errorf("unexpected answer: %v", v); return true })
	if served.Load() != 1024 || refusedAll.Load()+refusedClient.Load() != clients*perClient-1024 {
		t.Errorf("served %d, refused %d; want 1024 and %d", served.Load(), refusedAll.Load()+refusedClient.Load(), clients*perClient-1024)
	}
	if got := c.metric(t, "flowlens_collector_history_followers"); got != 1024 {
		t.Errorf("followers gauge %v, want 1024", got)
	}
	<-exported
	if got := c.metric(t, "flowlens_collector_received_flows_total"); got != 2*flows {
		t.Errorf("received %v flows, want %d", got, 2*flows)
	}
	if got := c.metric(t, "flowlens_collector_history_flows"); got != flows {
		t.Errorf("history holds %v flows, want %d", got, flows)
	}
	hwm := c.memKB(t, "VmHWM")
	// Logged, not bounded: refilling a full history alone takes the peak
	// past twice idle plus the history (the garbage collector's headroom
	// over 100,000 live flows), followers or not.
	t.Logf("idle RSS %d KiB, full history %d KiB, peak %d KiB (1024 followers, a second history's worth of flows)", idle, hist, hwm)
	got := c.metric(t, `flowlens_collector_history_refused_requests_total{reason="followers"}`) +
		c.metric(t, `flowlens_collector_history_refused_requests_total{reason="followers_per_client"}`)
	if got != clients*perClient-1024 {
		t.Errorf("refusals counted %v, want %d", got, clients*perClient-1024)
	}
}

package agent_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/pkg/receiver"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// The agent exports to stdout and over gRPC at once; a real collector on
// loopback receives exactly the flows the agent evicted (same count, same
// packet and byte sums, same keys), in plaintext and over mTLS.
func TestGRPCExportExact(t *testing.T) {
	for _, tlsMode := range []string{"plaintext", "mtls"} {
		t.Run(tlsMode, func(t *testing.T) {
			var opts receiver.Options
			args := []string{"--export=stdout,grpc", "--cache-active-timeout=200ms", "--grpc-batch-size=7"}
			if tlsMode == "mtls" {
				pki := receivertest.NewPKI(t)
				cfg, err := receiver.ServerTLS(pki.ServerCert, pki.ServerKey, pki.CA)
				if err != nil {
					t.Fatal(err)
				}
				opts.TLS = cfg
				args = append(args, "--tls-ca="+pki.CA, "--tls-cert="+pki.ClientCert, "--tls-key="+pki.ClientKey)
			}
			rec := receivertest.Start(t, opts)
			p := agenttest.NewPair(t)
			agenttest.MustListen(t, p.B, p.IPB+":9000")
			h := agenttest.Start(t, 2, agent.Options{}, append(args, p.NetnsArg(), "--target="+rec.Addr, "--node-name=node-test")...)
			const flows, per = 40, 5
			for i := 0; i < flows; i++ {
				if err := netlab.UDPSend(p.A, fmt.Sprintf("%s:%d", p.IPA, 30000+i), p.IPB+":9000", []byte("grpc"), per); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(300 * time.Millisecond) // at least one timer eviction
			local := h.Stop()
			got := rec.Flows()
			if len(got) != len(local) {
				t.Fatalf("collector received %d flows, agent exported %d to stdout", len(got), len(local))
			}
			var lp, lb uint64
			for _, f := range local {
				lp += f.Packets
				lb += f.Bytes
			}
			rb, rp := receivertest.Sums(got)
			if rp != lp || rb != lb {
				t.Fatalf("collector sums %d packets / %d bytes, stdout %d / %d", rp, rb, lp, lb)
			}
			pk, _, _ := agenttest.Sum(local, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 9000, Proto: 17})
			if pk != flows*per {
				t.Fatalf("%d packets of the test flows, want %d", pk, flows*per)
			}
			for _, f := range got {
				if f.GetNodeName() != "node-test" || len(f.GetAgentIp()) == 0 {
					t.Fatalf("flow without agent identity: node %q ip %v", f.GetNodeName(), f.GetAgentIp())
				}
			}
			if tlsMode == "mtls" && rec.Peers()["agent-1"] == 0 {
				t.Fatalf("no batch from the client certificate's identity: %v", rec.Peers())
			}
		})
	}
}

// /metrics while traffic runs: evicted flows, the datapath's counters, the
// hooks and the kernel-side cost of the agent's own programs.
func TestMetricsEndpoint(t *testing.T) {
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--metrics-address=127.0.0.1:0", "--cache-active-timeout=100ms")
	const n = 30
	if err := netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":9000", []byte("m"), n); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // a few evictions
	base := "http://" + h.A.MetricsAddr()
	status := func(path string) int {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := status("/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	// Ready once the initial interfaces are attached and the listing has
	// settled (Agent.Ready): poll as a readiness probe does.
	for deadline := time.Now().Add(5 * time.Second); status("/readyz") != 200; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("/readyz not 200 after 5s")
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	value := func(series string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no series %s in /metrics", series)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	// Two veth ends saw n packets each: ingress + egress programs ran 2n times at least.
	runs := 0.0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "flowlens_agent_bpf_program_runs_total{") && strings.Contains(line, "flowlens_") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			runs += v
		}
	}
	if runs < 2*n {
		t.Fatalf("tc program runs %v, want >= %d:\n%s", runs, 2*n, grep(text, "bpf_program_runs"))
	}
	if v := value(`flowlens_agent_attached_interfaces`); v != 2 {
		t.Fatalf("attached interfaces %v", v)
	}
	for _, hook := range []string{"drops", "rtt", "retransmits"} {
		if v := value(`flowlens_agent_hook_up{hook="` + hook + `"}`); v != 1 {
			t.Fatalf("hook %s up = %v", hook, v)
		}
	}
	if v := value(`flowlens_agent_evicted_flows_total{source="map"}`); v < 1 {
		t.Fatalf("evicted flows %v", v)
	}
	if v := value(`flowlens_agent_flow_map_capacity`); v != 100000 {
		t.Fatalf("flow map capacity %v", v)
	}
	if v := value(`flowlens_agent_bpf_stats_enabled`); v != 1 {
		t.Fatalf("bpf stats enabled %v", v)
	}
	h.Stop()
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// --bpf-stats=off: the agent does not hold the kernel's run-time statistics
// (they would cost every BPF program on the node), and says so in /metrics;
// flows are counted and exported as usual.
func TestBPFStatsOff(t *testing.T) {
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--metrics-address=127.0.0.1:0", "--bpf-stats=off")
	const n = 7
	if err := netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":9000", []byte("s"), n); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + h.A.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^flowlens_agent_bpf_stats_enabled 0$`).Match(body) {
		t.Fatalf("want flowlens_agent_bpf_stats_enabled 0:\n%s", grep(string(body), "bpf_stats"))
	}
	var pkts uint64
	for _, f := range h.Stop() {
		if f.SrcPort == 4000 && f.DstPort == 9000 {
			pkts += f.Packets
		}
	}
	if pkts != n {
		t.Fatalf("exported %d packets of the UDP flow, want %d", pkts, n)
	}
}

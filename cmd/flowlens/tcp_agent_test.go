package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// Real sockets through the real agent (feature tcp), a real collector and
// observe: 40 connects to a closed port and 10 established ones. The
// collector's tcp_connects_total says 40 refused and 10 established, its
// tcp_resets_total 40, as the client kernel's TcpAttemptFails and the
// server kernel's TcpOutRsts say; --tcp-result refused and --tcp-failed
// give exactly the client's refused flows, their tcp_refused summing to
// the same 40.
func TestObserveTCPRealAgent(t *testing.T) {
	netlab.Require(t)
	const clIP, svIP = "10.177.44.1", "10.177.44.2"
	p := agenttest.PairOf(t, "tcpobs-c", "tcpobs-s", clIP, svIP, "/24", netlab.Quiet)
	static := filepath.Join(t.TempDir(), "cluster.json")
	js, _ := json.Marshal(map[string]enriched.K8sContext{
		clIP: {Kind: enriched.KindPod, Namespace: "shop", Name: "web-1", Workload: "web", WorkloadKind: "Deployment", Node: "node-tcp"},
		svIP: {Kind: enriched.KindPod, Namespace: "data", Name: "db-0", Workload: "db", WorkloadKind: "StatefulSet", Node: "node-tcp"},
	})
	if err := os.WriteFile(static, js, 0o644); err != nil {
		t.Fatal(err)
	}
	metrics := testkit.FreeAddr(t)
	col := startCollector(t, "--k8s-static="+static, "--metrics-address="+metrics)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--export=grpc", "--target="+col,
		"--node-name=node-tcp", "--cache-active-timeout=500ms", "--features=tcp")
	if n := h.A.DP.Attached(); n != 2 {
		t.Fatalf("agent attached to %d interfaces, want 2", n)
	}

	var ln net.Listener
	if err := p.B.Do(func() (err error) { ln, err = net.Listen("tcp", svIP+":8080"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c0, s0 := netlab.NetCounters(t, p.A, "snmp", "Tcp:"), netlab.NetCounters(t, p.B, "snmp", "Tcp:")
	const refused, established = 40, 10
	dial := func(port string) error {
		return p.A.Do(func() error {
			c, err := net.DialTimeout("tcp", svIP+":"+port, 5*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	for i := range refused {
		if err := dial("7301"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("connect %d: %v, want connection refused", i, err)
		}
	}
	for i := range established {
		if err := dial("8080"); err != nil {
			t.Fatalf("connect %d to the listener: %v", i, err)
		}
	}
	c1, s1 := netlab.NetCounters(t, p.A, "snmp", "Tcp:"), netlab.NetCounters(t, p.B, "snmp", "Tcp:")
	fails, rsts := c1["AttemptFails"]-c0["AttemptFails"], s1["OutRsts"]-s0["OutRsts"]
	if fails != refused {
		t.Fatalf("client TcpAttemptFails +%d, want %d", fails, refused)
	}

	// The collector's metrics, once every record is in.
	url := "http://" + metrics + "/metrics"
	var got map[string]float64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		fams := promtest.Scrape(t, url)
		got = map[string]float64{}
		for _, r := range []string{"refused", "established", "timeout"} {
			got[r], _ = promtest.Sum(fams, "flowlens_collector_tcp_connects_total", "src_workload=web", "dst_workload=db", "result="+r)
		}
		got["resets"], _ = promtest.Sum(fams, "flowlens_collector_tcp_resets_total", "src_workload=db", "dst_workload=web")
		if got["refused"] == refused && got["established"] >= established && got["resets"] >= float64(rsts) {
			break
		}
		if time.Now().After(deadline) {
			break
		}
	}
	// established is each record's connects - refused - timeouts (never
	// below 0): 10, plus a refused connect whose SYN and RST fell in two
	// eviction periods (its SYN's record counts it established). The
	// records say how many.
	type record struct {
		TCPConnects uint64 `json:"tcp_connects"`
		TCPRefused  uint64 `json:"tcp_refused"`
		TCPTimeouts uint64 `json:"tcp_timeouts"`
	}
	var records []record
	srv := "--server=" + col
	for _, l := range strings.Split(strings.TrimSpace(observeOut(t, srv, "--last=0", "-o", "json", "--from-ip="+clIP, "--protocol=tcp")), "\n") {
		var r record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		records = append(records, r)
	}
	var wantEstablished uint64
	for _, r := range records {
		if f := r.TCPRefused + r.TCPTimeouts; r.TCPConnects > f {
			wantEstablished += r.TCPConnects - f
		}
	}
	t.Logf("collector: %v; client TcpAttemptFails +%d, server TcpOutRsts +%d; %d client records, established by them %d",
		got, fails, rsts, len(records), wantEstablished)
	if got["refused"] != float64(fails) || got["established"] != float64(wantEstablished) || wantEstablished < established ||
		got["timeout"] != 0 || got["resets"] != float64(rsts) {
		t.Errorf("collector: refused %v established %v timeout %v resets %v; want %d (TcpAttemptFails), %d (the records', at least %d), 0, %d (TcpOutRsts)",
			got["refused"], got["established"], got["timeout"], got["resets"], fails, wantEstablished, established, rsts)
	}

	// observe: the refused flows, and only them.
	type tcpFlow struct {
		SrcAddr    string `json:"src_addr"`
		DstPort    int    `json:"dst_port"`
		TCPRole    string `json:"tcp_role"`
		TCPRefused uint64 `json:"tcp_refused"`
	}
	for _, args := range [][]string{{"--tcp-result=refused"}, {"--tcp-failed"}} {
		out := observeOut(t, append([]string{srv, "--last=0", "-o", "json", "--ip=10.177.44.0/24"}, args...)...)
		var sum uint64
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var f tcpFlow
			if err := json.Unmarshal([]byte(l), &f); err != nil {
				t.Fatalf("%v: %q: %v", args, l, err)
			}
			if f.SrcAddr != clIP || f.DstPort != 7301 || f.TCPRole != "client" {
				t.Errorf("%v: flow %+v, want the client's to port 7301", args, f)
			}
			sum += f.TCPRefused
		}
		if sum != fails {
			t.Errorf("%v: tcp_refused sums to %d, want %d (TcpAttemptFails)", args, sum, fails)
		}
	}
	if out := observeOut(t, srv, "--last=1", "-o", "compact", "--tcp-result=refused"); !strings.Contains(out, " tcp=client refused=1") {
		t.Errorf("compact: %q", out)
	}
	if out := observeOut(t, srv, "--last=0", "-o", "json", "--ip=10.177.44.0/24", "--tcp-result=timeout"); out != "" {
		t.Errorf("--tcp-result=timeout: %q, want nothing", out)
	}
}

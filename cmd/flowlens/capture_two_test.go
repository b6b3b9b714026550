package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// twoNode is one node of the two-collector lab: a client and a server
// namespace joined by a veth, its own agent exporting to its own
// collector.
type twoNode struct {
	node, clientIP, serverIP, svIf string
	cl, sv                         *netlab.Netns
	col                            string
	metrics                        string // the agent's /metrics
}

// The capture merged across collectors: two nodes, each with its agent
// connected to its own collector (as with two collector replicas); the
// real CLI asks both and merges. 100 datagrams on each node, sent
// alternately: tshark reads exactly 200, 100 of each node with its
// addresses, ports and comment, in time order, both nodes' packets
// interleaved; the end reports per node, merged (each collector lacks
// the other's node, which is not reported missing; node-c, asked but on
// no collector, is; both nodes' clamped snaplen is said).
func TestCaptureTwoCollectors(t *testing.T) {
	netlab.Require(t)
	nodes := []*twoNode{
		{node: "node-a", clientIP: "10.177.46.1", serverIP: "10.177.46.2", svIf: "cpa-sv0"},
		{node: "node-b", clientIP: "10.177.47.1", serverIP: "10.177.47.2", svIf: "cpb-sv0"},
	}
	cluster := map[string]enriched.K8sContext{}
	for i, n := range nodes {
		cluster[n.clientIP] = enriched.K8sContext{Kind: enriched.KindPod, Namespace: "shop", Name: fmt.Sprintf("client-%d", i), Workload: "client", WorkloadKind: "Deployment", Node: n.node}
		cluster[n.serverIP] = enriched.K8sContext{Kind: enriched.KindPod, Namespace: "data", Name: fmt.Sprintf("server-%d", i), Workload: "server", WorkloadKind: "StatefulSet", Node: n.node}
	}
	static := filepath.Join(t.TempDir(), "cluster.json")
	js, _ := json.Marshal(cluster)
	if err := os.WriteFile(static, js, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		p := fmt.Sprintf("cp%c", 'a'+i)
		n.cl, n.sv = netlab.NewNetns(t, p+"-cl"), netlab.NewNetns(t, p+"-sv")
		netlab.Quiet(t, n.cl)
		netlab.Quiet(t, n.sv)
		netlab.Veth(t, n.cl, p+"-cl0", n.sv, n.svIf)
		netlab.AddAddr(t, n.cl, p+"-cl0", n.clientIP+"/24")
		netlab.AddAddr(t, n.sv, n.svIf, n.serverIP+"/24")
		n.col, _ = startCollectorProc(t, "--k8s-static="+static)
		h := agenttest.Start(t, 2, agent.Options{}, "--netns="+n.cl.Name+","+n.sv.Name, "--export=grpc", "--target="+n.col,
			"--node-name="+n.node, "--metrics-address="+testkit.FreeAddr(t))
		n.metrics = "http://" + h.A.MetricsAddr() + "/metrics"
		udp, err := netlab.UDPListen(n.sv, n.serverIP+":7001")
		if err != nil {
			t.Fatal(err)
		}
		defer udp.Close()
	}
	// Each agent's capture stream is up once its collector reaches its node.
	for _, n := range nodes {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var out, errOut strings.Builder
			code := run(context.Background(), []string{"capture", "--server", n.col, "-o", "json", "--node", n.node, "--to-port", "1", "--duration", "100ms"},
				func(string) string { return "" }, &out, &errOut)
			if code == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's capture stream not up after 60s: exit %d, %s", n.node, code, errOut.String())
			}
		}
	}
	running := func(n *twoNode) float64 {
		v, _ := promtest.Value(promtest.Scrape(t, n.metrics), "flowlens_agent_captures_running")
		return v
	}
	waitRunning := func(want float64) {
		t.Helper()
		for _, n := range nodes {
			for deadline := time.Now().Add(60 * time.Second); running(n) != want; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: flowlens_agent_captures_running %v after 60s, want %v", n.node, running(n), want)
				}
			}
		}
	}

	file := filepath.Join(t.TempDir(), "two.pcapng")
	r := &cliRun{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.code = run(context.Background(), []string{"capture", "--server", nodes[0].col, "--server", nodes[1].col, "-w", file,
			"--node", "node-a,node-b,node-c", "--protocol", "udp", "--to-port", "7001", "--direction", "ingress", "--snaplen", "256", "--duration", "15s"},
			func(string) string { return "" }, &r.out, &r.errOut)
	}()
	waitRunning(1)
	for i := range 100 {
		for _, n := range nodes {
			if err := netlab.UDPSend(n.cl, n.clientIP+":5001", n.serverIP+":7001", make([]byte, 100+i), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	code, out, errOut := r.wait(t)
	want := "200 packets captured\n" +
		"capture ended: --duration passed\n" +
		"node node-c: no agent of this node is connected to this collector\n" +
		"node node-a: snaplen clamped to 128 bytes (its agent's --capture-max-snaplen)\n" +
		"node node-b: snaplen clamped to 128 bytes (its agent's --capture-max-snaplen)\n"
	if code != 0 || out != "" || errOut != want {
		t.Fatalf("exit %d, stdout %q, stderr\n%s\nwant\n%s", code, out, errOut, want)
	}
	rows := tshark(t, file, "frame.interface_name", "ip.src", "ip.dst", "udp.srcport", "udp.dstport", "frame.len", "frame.cap_len", "frame.comment", "frame.time_epoch")
	if len(rows) != 200 {
		t.Fatalf("tshark read %d packets, want 200", len(rows))
	}
	seen := map[string]int{}
	last, firstHalf := "", map[string]int{}
	for i, row := range rows {
		var n *twoNode
		for _, x := range nodes {
			if row[0] == x.svIf {
				n = x
			}
		}
		if n == nil {
			t.Fatalf("packet %d on %s: not a server's interface", i, row[0])
		}
		k := seen[n.node]
		seen[n.node]++
		wire := 14 + 20 + 8 + 100 + k
		ci := strings.TrimPrefix(n.node, "node-")
		idx := map[string]int{"a": 0, "b": 1}[ci]
		wantRow := []string{n.svIf, n.clientIP, n.serverIP, "5001", "7001", fmt.Sprint(wire), fmt.Sprint(min(128, wire)),
			fmt.Sprintf("node=%s src=pod:shop/client-%d(Deployment/client) dst=pod:data/server-%d(StatefulSet/server)", n.node, idx, idx)}
		if got := row[:8]; strings.Join(got, "|") != strings.Join(wantRow, "|") {
			t.Errorf("packet %d (%s's %d-th): tshark read %q, want %q", i, n.node, k, got, wantRow)
		}
		if row[8] < last {
			t.Errorf("packet %d at %s, before the previous %s", i, row[8], last)
		}
		last = row[8]
		if i < 100 {
			firstHalf[n.node]++
		}
	}
	if seen["node-a"] != 100 || seen["node-b"] != 100 || firstHalf["node-a"] < 40 || firstHalf["node-b"] < 40 {
		t.Errorf("per node %v, in the first half %v; want 100 each, interleaved", seen, firstHalf)
	}
	t.Logf("first 100 packets: %v", firstHalf)
	waitRunning(0)
}

package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// The lab: a client namespace (pod shop/client-1) and a server namespace
// (pod data/server-0) joined by a veth pair, the real agent attached to
// both ends exporting to a real collector.
const (
	clientIP = "10.177.43.1"
	serverIP = "10.177.43.2"
)

// observedFlow is what the tests read of observe's JSON lines.
type observedFlow struct {
	SrcAddr     string `json:"src_addr"`
	DstAddr     string `json:"dst_addr"`
	SrcPort     int    `json:"src_port"`
	DstPort     int    `json:"dst_port"`
	Proto       int    `json:"proto"`
	Packets     uint64 `json:"packets"`
	TCPFlags    int    `json:"tcp_flags"`
	NodeName    string `json:"node_name"`
	DropPackets uint64 `json:"drop_packets"`
	DropCause   string `json:"drop_cause"`
	SrcK8s      struct {
		Namespace, Name string
	} `json:"src_k8s"`
}

func (f observedFlow) key() string {
	return f.SrcAddr + ":" + itoa(f.SrcPort) + ">" + f.DstAddr + ":" + itoa(f.DstPort) + "/" + itoa(f.Proto)
}

func itoa(n int) string { return strconv.Itoa(n) }

func parseObserved(t *testing.T, out string) []observedFlow {
	t.Helper()
	var fs []observedFlow
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var f observedFlow
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		fs = append(fs, f)
	}
	return fs
}

// byKey sums packets per 5-tuple (one flow may span eviction periods).
func byKey(fs []observedFlow) map[string]uint64 {
	out := map[string]uint64{}
	for _, f := range fs {
		out[f.key()] += f.Packets
	}
	return out
}

func TestObserveRealAgent(t *testing.T) {
	netlab.Require(t)
	cl := netlab.NewNetns(t, "observe-cl")
	sv := netlab.NewNetns(t, "observe-sv")
	netlab.Quiet(t, cl)
	netlab.Quiet(t, sv)
	netlab.QuietIPv6(t, cl)
	netlab.QuietIPv6(t, sv)
	netlab.Veth(t, cl, "obs-cl0", sv, "obs-sv0")
	netlab.AddAddr(t, cl, "obs-cl0", clientIP+"/24")
	netlab.AddAddr(t, sv, "obs-sv0", serverIP+"/24")

	static := filepath.Join(t.TempDir(), "cluster.json")
	js, _ := json.Marshal(map[string]enriched.K8sContext{
		clientIP: {Kind: enriched.KindPod, Namespace: "shop", Name: "client-1", Workload: "client", WorkloadKind: "Deployment", Node: "node-obs"},
		serverIP: {Kind: enriched.KindPod, Namespace: "data", Name: "server-0", Workload: "server", WorkloadKind: "StatefulSet", Node: "node-obs"},
	})
	if err := os.WriteFile(static, js, 0o644); err != nil {
		t.Fatal(err)
	}
	col := startCollector(t, "--k8s-static="+static)

	h := agenttest.Start(t, 2, agent.Options{}, "--netns="+cl.Name+","+sv.Name, "--export=grpc", "--target="+col,
		"--node-name=node-obs", "--cache-active-timeout=500ms")
	if n := h.A.DP.Attached(); n != 2 {
		t.Fatalf("agent attached to %d interfaces, want 2", n)
	}

	// Traffic: 10 datagrams to a listener, 3 to a closed port (dropped:
	// no socket), one TCP connection.
	udp, err := netlab.UDPListen(sv, serverIP+":7001")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	if err := netlab.UDPSend(cl, clientIP+":5001", serverIP+":7001", make([]byte, 100), 10); err != nil {
		t.Fatal(err)
	}
	if err := netlab.UDPSend(cl, clientIP+":5002", serverIP+":7002", make([]byte, 100), 3); err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := sv.Do(func() (err error) { ln, err = net.Listen("tcp", serverIP+":8080"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	var conn net.Conn
	if err := cl.Do(func() (err error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientIP), Port: 5003}}
		conn, err = d.Dial("tcp", serverIP+":8080")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("hello"))
	conn.Close()

	// Wait until the collector has them all (evictions every 500ms). The
	// drop hooks see the whole host, other tests' drops included: every
	// query keeps to the lab's addresses.
	srv := "--server=" + col
	observeOut := func(t *testing.T, args ...string) string {
		return observeOut(t, append([]string{"--ip=10.177.43.0/24"}, args...)...)
	}
	want := map[string]uint64{
		clientIP + ":5001>" + serverIP + ":7001/17": 10,
		clientIP + ":5002>" + serverIP + ":7002/17": 3,
	}
	var got map[string]uint64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got = byKey(parseObserved(t, observeOut(t, srv, "--last=0", "-o", "json", "--protocol=udp")))
		if len(got) == len(want) && got[clientIP+":5001>"+serverIP+":7001/17"] == 10 && got[clientIP+":5002>"+serverIP+":7002/17"] == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector history after 30s: %v, want %v", got, want)
		}
	}
	tcpOut := clientIP + ":5003>" + serverIP + ":8080/6"
	tcpBack := serverIP + ":8080>" + clientIP + ":5003/6"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got = byKey(parseObserved(t, observeOut(t, srv, "--last=0", "-o", "json", "--protocol=tcp", "--tcp-flags=FIN")))
		if len(got) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TCP flows with FIN after 30s: %v", got)
		}
	}

	for _, tc := range []struct {
		args []string
		want []string // the 5-tuples, exactly
	}{
		{[]string{"--to-port=7001"}, []string{clientIP + ":5001>" + serverIP + ":7001/17"}},
		{[]string{"--from-ip=" + clientIP, "--protocol=udp"}, []string{clientIP + ":5001>" + serverIP + ":7001/17", clientIP + ":5002>" + serverIP + ":7002/17"}},
		{[]string{"--namespace=data", "--port=8080"}, []string{tcpOut, tcpBack}},
		{[]string{"--pod=shop/client-1", "--tcp-flags=SYN_ACK"}, []string{tcpBack}},
		{[]string{"--workload=data/server", "--from-port=5003"}, []string{tcpOut}},
		{[]string{"--node=node-obs", "--to-ip=10.177.43.0/30", "--protocol=udp", "--not", "--port=7002"}, []string{clientIP + ":5001>" + serverIP + ":7001/17"}},
		{[]string{"--node=other"}, nil},
	} {
		fs := parseObserved(t, observeOut(t, append([]string{srv, "--last=0", "-o", "json"}, tc.args...)...))
		keys := map[string]bool{}
		for _, f := range fs {
			keys[f.key()] = true
			if f.NodeName != "node-obs" {
				t.Errorf("%v: node_name %q", tc.args, f.NodeName)
			}
		}
		if len(keys) != len(tc.want) {
			t.Errorf("%v: flows %v, want %v", tc.args, keys, tc.want)
		}
		for _, k := range tc.want {
			if !keys[k] {
				t.Errorf("%v: flows %v, want %v", tc.args, keys, tc.want)
			}
		}
		// The table shows the same flows.
		table := observeOut(t, append([]string{srv, "--last=0"}, tc.args...)...)
		if rows := len(strings.Split(strings.TrimSpace(table), "\n")) - 1; rows != len(fs) {
			t.Errorf("%v: table has %d rows, JSON %d flows:\n%s", tc.args, rows, len(fs), table)
		}
	}
	// The datagrams to the closed port were dropped: no socket. (The TCP
	// connection may have drops of its own, QUEUE_PURGE at close.)
	var dropped uint64
	for _, f := range parseObserved(t, observeOut(t, srv, "--last=0", "-o", "json", "--drop-cause=NO_SOCKET")) {
		if f.key() != clientIP+":5002>"+serverIP+":7002/17" || f.DropCause != "NO_SOCKET" {
			t.Errorf("--drop-cause=NO_SOCKET: %+v", f)
		}
		dropped += f.DropPackets
	}
	if dropped != 3 {
		t.Errorf("--drop-cause=NO_SOCKET: %d packets dropped, want 3", dropped)
	}
	drops := parseObserved(t, observeOut(t, srv, "--last=0", "-o", "json", "--drops"))
	if keys := byKey(drops); keys[clientIP+":5002>"+serverIP+":7002/17"] != 3 {
		t.Errorf("--drops: %v", keys)
	}
	for _, f := range drops {
		if f.DropPackets == 0 {
			t.Errorf("--drops gave a flow without drops: %+v", f)
		}
	}

	// Follow: new flows as they come, filtered.
	pr, pw := io.Pipe()
	fctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(fctx, []string{"observe", srv, "--ip=10.177.43.0/24", "-f", "-o", "json", "--to-port=7001"}, nil, pw, io.Discard)
		pw.Close()
	}()
	lines := make(chan string, 16)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				lines <- string(buf[:n])
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)                                                                  // not a timing assertion: lets the stream open before the traffic
	if err := netlab.UDPSend(cl, clientIP+":5009", serverIP+":7009", make([]byte, 10), 2); err != nil { // filtered out
		t.Fatal(err)
	}
	if err := netlab.UDPSend(cl, clientIP+":5008", serverIP+":7001", make([]byte, 10), 2); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-lines:
		fs := parseObserved(t, l)
		if len(fs) == 0 || fs[0].key() != clientIP+":5008>"+serverIP+":7001/17" {
			t.Errorf("followed: %s", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("follow: no flow in 30s")
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("follow exit %d", code)
	}
}

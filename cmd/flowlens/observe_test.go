package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

// cluster is the collectors' --k8s-static table.
var cluster = map[string]enriched.K8sContext{
	"10.0.0.1":   {Kind: enriched.KindPod, Namespace: "shop", Name: "web-1", Workload: "web", WorkloadKind: "Deployment", Node: "node-a"},
	"10.0.1.1":   {Kind: enriched.KindPod, Namespace: "data", Name: "db-0", Workload: "db", WorkloadKind: "StatefulSet", Node: "node-b"},
	"10.96.0.10": {Kind: enriched.KindService, Namespace: "kube-system", Name: "kube-dns", Workload: "kube-dns", WorkloadKind: "Service"},
}

var t0 = time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)

// rec is a flow from src to dst ending at t0+end seconds.
func rec(src, dst string, sport, dport uint16, proto uint8, end int) flow.Record {
	e := t0.Add(time.Duration(end) * time.Second)
	return flow.Record{SrcAddr: netip.MustParseAddr(src), DstAddr: netip.MustParseAddr(dst), SrcPort: sport, DstPort: dport, Proto: proto,
		Bytes: 1500, Packets: 1, Sampling: 1, StartTime: e.Add(-time.Second), EndTime: e, EthType: 0x800,
		Interfaces: []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirEgress}}}
}

// The flows: f1, f2 and f5 from node-a's agent to collector A, f3 and f4
// from node-b's to collector B; by end time f1 f3 f2 f4 f5.
func lab() (a, b []flow.Record) {
	f1 := rec("10.0.0.1", "10.0.1.1", 40000, 5432, 6, 1) // web-1 → db-0
	f1.TCPFlags, f1.RTT, f1.Bytes = 0x12, 5*time.Millisecond, 3000
	f2 := rec("10.0.0.1", "10.96.0.10", 40001, 53, 17, 3) // web-1 → kube-dns: NXDOMAIN
	f2.DNSID, f2.DNSFlags, f2.DNSRcode, f2.DNSName, f2.DNSLatency, f2.DNSLatencyMax = 7, 0x0100, 3, "nope.example", time.Millisecond, time.Millisecond
	// to the DNS pod on node-b through a VXLAN tunnel: the tunnel fields
	// must come through the collector and its history (JSON, jsonpb).
	f2.Tunnel = flow.Tunnel{TunnelType: flow.TunnelVXLAN, TunnelSrcAddr: netip.MustParseAddr("192.0.2.1"), TunnelDstAddr: netip.MustParseAddr("192.0.2.2"), TunnelVNI: 4096}
	f3 := rec("10.0.1.1", "10.0.0.1", 5432, 40000, 6, 2) // db-0 → web-1, dropped
	f3.TCPFlags, f3.DropPackets, f3.DropBytes, f3.DropCause = 0x14, 2, 120, "NETFILTER_DROP"
	f4 := rec("8.8.8.8", "10.0.0.1", 443, 40002, 6, 4) // external → web-1
	f4.TCPFlags, f4.RTT, f4.RTTMax = 0x10, 20*time.Millisecond, 20*time.Millisecond
	f5 := rec("fd00::1", "fd00::2", 0, 0, 58, 5)
	f5.IcmpType, f5.EthType = 128, 0x86dd
	return []flow.Record{f1, f2, f5}, []flow.Record{f3, f4}
}

// name identifies a flow of lab() in the output: f1..f5.
func name(src netip.Addr, sport uint16, dst netip.Addr) string {
	for n, k := range map[string]string{"f1": "10.0.0.1:40000>10.0.1.1", "f2": "10.0.0.1:40001>10.96.0.10", "f3": "10.0.1.1:5432>10.0.0.1",
		"f4": "8.8.8.8:443>10.0.0.1", "f5": "fd00::1:0>fd00::2"} {
		if fmt.Sprintf("%s:%d>%s", src, sport, dst) == k {
			return n
		}
	}
	return fmt.Sprintf("unknown(%s:%d>%s)", src, sport, dst)
}

// startLab runs collectors A and B with the lab's flows and returns
// --server for both.
func startLab(t *testing.T) (servers string, a, b []flow.Record) {
	static := filepath.Join(t.TempDir(), "cluster.json")
	js, err := json.Marshal(cluster)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(static, js, 0o644); err != nil {
		t.Fatal(err)
	}
	ca := startCollector(t, "--k8s-static="+static)
	cb := startCollector(t, "--k8s-static="+static)
	a, b = lab()
	send(t, ca, "node-a", a)
	send(t, cb, "node-b", b)
	return ca + "," + cb, a, b
}

// observeOut runs flowlens observe and returns its stdout, failing on a
// non-zero exit.
func observeOut(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut strings.Builder
	if code := run(context.Background(), append([]string{"observe"}, args...), nil, &out, &errOut); code != 0 {
		t.Fatalf("observe %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return out.String()
}

// jsonNames are the flows of JSON lines, in order.
func jsonNames(t *testing.T, out string) []string {
	t.Helper()
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var f struct {
			SrcAddr string `json:"src_addr"`
			DstAddr string `json:"dst_addr"`
			SrcPort uint16 `json:"src_port"`
		}
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("not JSON: %q: %v", line, err)
		}
		names = append(names, name(netip.MustParseAddr(f.SrcAddr), f.SrcPort, netip.MustParseAddr(f.DstAddr)))
	}
	return names
}

// tableNames are the flows of a table's rows, in order, after checking
// the header.
func tableNames(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(lines[0], "SRC_K8S") {
		t.Fatalf("no table header:\n%s", out)
	}
	var names []string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		// TIME SRC → DST ...
		src, err1 := netip.ParseAddrPort(f[1])
		dst, err2 := netip.ParseAddrPort(f[3])
		if err1 != nil || err2 != nil { // ICMP: no ports
			names = append(names, name(netip.MustParseAddr(f[1]), 0, netip.MustParseAddr(f[3])))
			continue
		}
		names = append(names, name(src.Addr(), src.Port(), dst.Addr()))
	}
	return names
}

// Each filter against two real collectors: exactly the expected flows,
// merged by end time, in JSON and in the table.
func TestObserveFilters(t *testing.T) {
	servers, _, _ := startLab(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "f1 f3 f2 f4 f5"},
		{[]string{"--last", "2"}, "f4 f5"},
		{[]string{"--namespace", "data"}, "f1 f3"},
		{[]string{"--namespace", "kube-system,data"}, "f1 f3 f2"},
		{[]string{"--pod", "shop/web-1"}, "f1 f3 f2 f4"},
		{[]string{"--pod", "db-0"}, "f1 f3"},
		{[]string{"--workload", "kube-system/kube-dns"}, "f2"},
		{[]string{"--workload", "db", "--workload", "kube-dns"}, "f1 f3 f2"},
		{[]string{"--node", "node-b"}, "f3 f4"},
		{[]string{"--ip", "10.0.1.0/24"}, "f1 f3"},
		{[]string{"--from-ip", "10.0.1.1"}, "f3"},
		{[]string{"--to-ip", "10.0.1.1,fd00::/8"}, "f1 f5"},
		{[]string{"--port", "5432"}, "f1 f3"},
		{[]string{"--from-port", "5432"}, "f3"},
		{[]string{"--to-port", "53"}, "f2"},
		{[]string{"--protocol", "udp,icmpv6"}, "f2 f5"},
		{[]string{"--drops"}, "f3"},
		{[]string{"--drop-cause", "NETFILTER_DROP"}, "f3"},
		{[]string{"--drop-cause", "NO_SOCKET"}, ""},
		{[]string{"--tcp-flags", "SYN"}, "f1"},
		{[]string{"--tcp-flags", "RST,SYN|ACK"}, "f1 f3"},
		{[]string{"--rtt-above", "10ms"}, "f4"},
		{[]string{"--dns-rcode", "NXDOMAIN"}, "f2"},
		{[]string{"--not", "--namespace", "shop"}, "f5"},
		{[]string{"--protocol", "tcp", "--not", "--node", "node-b"}, "f1"},
		{[]string{"--namespace", "data", "--port", "5432", "--from-port", "40000"}, "f1"},
		{[]string{"--since", t0.Add(2 * time.Second).Format(time.RFC3339), "--until", t0.Add(4 * time.Second).Format(time.RFC3339)}, "f3 f2 f4"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"--server", servers}, tc.args...)
			if got := strings.Join(jsonNames(t, observeOut(t, append(args, "-o", "json")...)), " "); got != tc.want {
				t.Errorf("json: %q, want %q", got, tc.want)
			}
			out := observeOut(t, append(args, "-o", "table")...)
			if got := strings.Join(tableNames(t, out), " "); got != tc.want {
				t.Errorf("table: %q, want %q\n%s", got, tc.want, out)
			}
		})
	}
}

// The JSON lines are exactly the collector's own (flowlens-collector
// --output json): the agent's fields, the identity, the context.
func TestObserveJSONIsTheCollectors(t *testing.T) {
	servers, a, _ := startLab(t)
	out := observeOut(t, "--server", servers, "-o", "json", "--from-port", "40001")
	f := enriched.Flow{Record: a[1], NodeName: "node-a", AgentIP: netip.MustParseAddr("192.0.2.1"), Enriched: true,
		Src: cluster["10.0.0.1"], Dst: cluster["10.96.0.10"]}
	if want := string(f.AppendJSON(nil)) + "\n"; out != want || !strings.Contains(out, `"tunnel_type":"vxlan","tunnel_src_addr":"192.0.2.1","tunnel_dst_addr":"192.0.2.2","tunnel_vni":4096`) {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	// jsonpb: the HistoryFlow message (proto field names), the same flow.
	out = observeOut(t, "--server", servers, "-o", "jsonpb", "--from-port", "40001")
	var h flowv1.HistoryFlow
	if err := protojson.Unmarshal([]byte(out), &h); err != nil || !strings.Contains(out, `"dns_name":`) || h.GetFlow().GetTunnel().GetTunnelVni() != 4096 {
		t.Fatalf("jsonpb: %v\n%s", err, out)
	}
	if !proto.Equal(&h, enriched.ToProto(&f)) {
		t.Errorf("jsonpb:\n got %v\nwant %v", &h, enriched.ToProto(&f))
	}
	// compact: one line with what the flow carries.
	out = observeOut(t, "--server", servers, "-o", "compact", "--from-port", "40001")
	if want := " node-a shop/web-1(Deployment/web) 10.0.0.1:40001 -> svc:kube-system/kube-dns 10.96.0.10:53 udp 1.5KiB 1p dns=nope.example rcode=NXDOMAIN tunnel=vxlan:192.0.2.1>192.0.2.2/vni=4096\n"; !strings.HasSuffix(out, want) {
		t.Errorf("compact: %q", out)
	}
}

// --follow: the history, then new flows as they arrive, filtered.
func TestObserveFollow(t *testing.T) {
	servers, _, _ := startLab(t)
	ca := strings.Split(servers, ",")[0]
	f := startFollow(t, "--server", servers, "-f", "--last", "1", "--protocol", "udp", "-o", "json")
	if n := jsonNames(t, f.next()); len(n) != 1 || n[0] != "f2" {
		t.Fatalf("history: %v", n)
	}
	// A TCP flow (filtered out), then a UDP one.
	tcp := rec("10.0.0.1", "10.0.1.1", 41000, 5432, 6, 10)
	udp := rec("10.0.0.1", "10.96.0.10", 41001, 53, 17, 11)
	send(t, ca, "node-a", []flow.Record{tcp})
	send(t, ca, "node-a", []flow.Record{udp})
	// Collector B stays quiet: the flow waits --reorder-window (2s) at
	// most, not for B.
	if l := f.next(); !strings.Contains(l, `"src_port":41001`) {
		t.Fatalf("followed: %s", l)
	}
	if rest := f.stop(); len(rest) != 0 {
		t.Errorf("more lines: %q", rest)
	}
}

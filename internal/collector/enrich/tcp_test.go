package enrich_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Connects by result, resets, zero windows and handshake latency by
// workload pair, from records through the pipeline: exact counts (the
// agent sees every SYN and RST: sampling does not scale them), established
// = connects - refused - timeouts of each record, never negative; flows
// without tcp fields do not count.
func TestTCPMetrics(t *testing.T) {
	m, err := enrich.NewMetrics(enrich.MetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []enriched.Flow
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m, Sink: func(_ context.Context, f []enriched.Flow) error { got = f; return nil }}
	client, server := flow.TCPRoleClient, flow.TCPRoleServer
	hs1, hs2, hs3 := 200*time.Microsecond, 1200*time.Millisecond, 30*time.Millisecond
	b := batch(
		// web-1 → db-0: 100 connects to a closed port, all refused,
		// sampled 1:4 (not scaled) ...
		fl{src: "10.0.0.1", dst: "10.0.1.1", bytes: 6000, packets: 100, sampling: 4, dir: flow.DirEgress, node: "node-a",
			tcp: flow.TCPFields{TCPRole: client, TCPConnects: 100, TCPRefused: 100}},
		// ... and the server's 100 RSTs.
		fl{src: "10.0.1.1", dst: "10.0.0.1", bytes: 5400, packets: 100, sampling: 1, dir: flow.DirIngress, node: "node-b",
			tcp: flow.TCPFields{TCPRole: server, TCPResets: 100}},
		// web-2 → db-0: 10 connects whose SYNs a firewall dropped; the
		// drop is on the same record.
		fl{src: "10.0.0.2", dst: "10.0.1.1", bytes: 1800, packets: 30, sampling: 1, dir: flow.DirEgress, node: "node-b",
			dropP: 30, dropB: 1800, cause: "NETFILTER_DROP",
			tcp: flow.TCPFields{TCPRole: client, TCPConnects: 10, TCPTimeouts: 10, TCPSynRetrans: 20}},
		// web-1 → db-0: 50 established (handshake 200 µs), then web-2's
		// 3 after a SYN retransmission (1.2 s).
		fl{src: "10.0.0.1", dst: "10.0.1.1", bytes: 9000, packets: 150, sampling: 1, dir: flow.DirEgress, node: "node-a",
			tcp: flow.TCPFields{TCPRole: client, TCPConnects: 50, TCPHandshake: hs1, TCPHandshakeMax: hs1}},
		fl{src: "10.0.0.2", dst: "10.0.1.1", bytes: 300, packets: 5, sampling: 1, dir: flow.DirEgress, node: "node-b",
			tcp: flow.TCPFields{TCPRole: client, TCPConnects: 3, TCPSynRetrans: 3, TCPHandshake: hs2, TCPHandshakeMax: hs2}},
		// A refusal whose SYN was in the previous period: refused 1,
		// established 0 (not -1).
		fl{src: "10.0.0.2", dst: "10.0.1.1", bytes: 60, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-b",
			tcp: flow.TCPFields{TCPRole: client, TCPRefused: 1}},
		// db-0, which stopped reading, advertises a zero window 7 times.
		fl{src: "10.0.1.1", dst: "10.0.0.2", bytes: 420, packets: 7, sampling: 1, dir: flow.DirEgress, node: "node-b",
			tcp: flow.TCPFields{TCPRole: server, TCPZeroWindows: 7}},
		// web-1 → the internet: 2 connects, 1 refused.
		fl{src: "10.0.0.1", dst: "8.8.8.8", bytes: 120, packets: 2, sampling: 1, dir: flow.DirEgress, node: "node-a",
			tcp: flow.TCPFields{TCPRole: client, TCPConnects: 2, TCPRefused: 1, TCPHandshake: hs3, TCPHandshakeMax: hs3}},
		// No tcp fields.
		known[0],
	)
	if err := p.Handle(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	hist := func(lv string, v ...time.Duration) string {
		var s strings.Builder
		var sum float64
		for _, le := range append(enrich.TCPHandshakeBuckets, 0) {
			n := 0
			for _, d := range v {
				if le == 0 || d.Seconds() <= le {
					n++
				}
			}
			les := fmt.Sprint(le)
			if le == 0 {
				les = "+Inf"
			}
			fmt.Fprintf(&s, "flowlens_collector_tcp_handshake_seconds_bucket{%s,le=%q} %d\n", lv, les, n)
		}
		for _, d := range v {
			sum += d.Seconds()
		}
		fmt.Fprintf(&s, "flowlens_collector_tcp_handshake_seconds_sum{%s} %v\n", lv, sum)
		fmt.Fprintf(&s, "flowlens_collector_tcp_handshake_seconds_count{%s} %d\n", lv, len(v))
		return s.String()
	}
	const webDB = `dst_namespace="db",dst_workload="db",src_namespace="shop",src_workload="web"`
	const webExt = `dst_namespace="",dst_workload="external",src_namespace="shop",src_workload="web"`
	const db, ext = `dst_namespace="db",dst_workload="db"`, `dst_namespace="",dst_workload="external"`
	connects := func(dst, result string) string {
		return `flowlens_collector_tcp_connects_total{` + dst + `,result="` + result + `",src_namespace="shop",src_workload="web"}`
	}
	want := `
# HELP flowlens_collector_tcp_connects_total TCP connection attempts (feature tcp; the first SYN of each connection, counted on the client's flow; not scaled), by source (the client) and destination namespace and workload and result: refused (answered by a RST), timeout (abandoned without an answer), established (the others: tcp_connects - tcp_refused - tcp_timeouts of each flow record).
# TYPE flowlens_collector_tcp_connects_total counter
` + connects(ext, "established") + ` 1
` + connects(ext, "refused") + ` 1
` + connects(db, "established") + ` 53
` + connects(db, "refused") + ` 101
` + connects(db, "timeout") + ` 10
# HELP flowlens_collector_tcp_resets_total TCP RST segments sent (feature tcp; in any state; not scaled), by the sender's (the flow's source) and the destination's namespace and workload.
# TYPE flowlens_collector_tcp_resets_total counter
flowlens_collector_tcp_resets_total{dst_namespace="shop",dst_workload="web",src_namespace="db",src_workload="db"} 100
# HELP flowlens_collector_tcp_zero_windows_total TCP segments advertising a zero receive window (feature tcp: the sender could not keep up with reading; not scaled), by the sender's (the flow's source) and the destination's namespace and workload.
# TYPE flowlens_collector_tcp_zero_windows_total counter
flowlens_collector_tcp_zero_windows_total{dst_namespace="shop",dst_workload="web",src_namespace="db",src_workload="db"} 7
# HELP flowlens_collector_tcp_handshake_seconds TCP SYN to SYN-ACK latency of the client's connects (feature tcp), observed once per flow record that reports one (the last of the eviction period), by source (the client) and destination namespace and workload.
# TYPE flowlens_collector_tcp_handshake_seconds histogram
` + hist(webExt, hs3) + hist(webDB, hs1, hs2) + `
# HELP flowlens_collector_drop_packets_total Packets the kernel dropped, by source and destination namespace and drop cause (the kernel's drop reason).
# TYPE flowlens_collector_drop_packets_total counter
flowlens_collector_drop_packets_total{cause="NETFILTER_DROP",dst_namespace="db",src_namespace="shop"} 30
`
	if err := gatherAndCompare(t, m.Registry(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// The buckets the expected text was built from, spelled out once.
	if !strings.Contains(want, `{`+webDB+`,le="1"} 1`) || !strings.Contains(want, `{`+webDB+`,le="3"} 2`) ||
		!strings.Contains(want, `{`+webExt+`,le="0.025"} 0`) || !strings.Contains(want, `{`+webExt+`,le="0.1"} 1`) {
		t.Errorf("histogram text:\n%s", want)
	}

	// The collector's JSON has the agent's tcp_* keys, only on flows with
	// tcp fields; the timed-out connects keep their drop cause.
	if len(got) != len(b.Flows) {
		t.Fatalf("%d flows at the sink", len(got))
	}
	for i, want := range map[int]string{
		0: `"tcp_role":"client","tcp_connects":100,"tcp_refused":100,"tcp_timeouts":0,"tcp_syn_retrans":0,"tcp_resets":0,"tcp_zero_windows":0,"tcp_handshake_ns":0,"tcp_handshake_max_ns":0`,
		1: `"tcp_role":"server","tcp_connects":0,"tcp_refused":0,"tcp_timeouts":0,"tcp_syn_retrans":0,"tcp_resets":100,`,
		2: `"tcp_role":"client","tcp_connects":10,"tcp_refused":0,"tcp_timeouts":10,"tcp_syn_retrans":20,`,
		3: `"tcp_handshake_ns":200000,"tcp_handshake_max_ns":200000`,
	} {
		line := string(got[i].AppendJSON(nil))
		if !strings.Contains(line, want) {
			t.Errorf("flow %d: JSON lacks %s:\n%s", i, want, line)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("flow %d: invalid JSON: %v", i, err)
		}
	}
	if line := string(got[2].AppendJSON(nil)); !strings.Contains(line, `"drop_cause":"NETFILTER_DROP"`) {
		t.Errorf("timed-out connects lost their drop cause: %s", line)
	}
	if line := string(got[8].AppendJSON(nil)); strings.Contains(line, `"tcp_role"`) {
		t.Errorf("flow without tcp fields: %s", line)
	}

	// Off by the allow-list, and each alone.
	off, _ := enrich.NewMetrics(enrich.MetricsOptions{Enabled: []string{"flow_bytes_total"}})
	(&enrich.Pipeline{Resolver: resolver(t), Metrics: off}).Handle(context.Background(), b)
	if n := seriesPerFamily(t, off); n[enrich.MetricTCPConnects]+n[enrich.MetricTCPResets]+n[enrich.MetricTCPZeroWindows]+n[enrich.MetricTCPHandshake] != 0 {
		t.Errorf("tcp metrics served when not enabled: %v", n)
	}
	for name, series := range map[string]int{"tcp_connects_total": 5, "tcp_resets_total": 1, "tcp_zero_windows_total": 1, "tcp_handshake_seconds": 2} {
		on, err := enrich.NewMetrics(enrich.MetricsOptions{Enabled: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		(&enrich.Pipeline{Resolver: resolver(t), Metrics: on}).Handle(context.Background(), b)
		n := seriesPerFamily(t, on)
		if n[enrich.Prefix+name] != series || n[enrich.MetricFlowBytes] != 0 || n[enrich.MetricDropPackets] != 0 {
			t.Errorf("%s alone: %v", name, n)
		}
	}
	if got := enrich.FeatureMetrics("tcp"); strings.Join(got, ",") != strings.Join([]string{enrich.MetricTCPConnects,
		enrich.MetricTCPResets, enrich.MetricTCPZeroWindows, enrich.MetricTCPHandshake}, ",") {
		t.Errorf("FeatureMetrics(tcp) = %v", got)
	}
}

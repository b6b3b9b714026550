package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"strings"
	"testing"
)

// A /proc/net/snmp of this host (Tcp and Udp lines; IcmpMsg and UdpLite
// follow the same shape).
const snmpSample = `Ip: Forwarding DefaultTTL InReceives InHdrErrors
Ip: 1 64 1000 0
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 323212 278621 43175 82017 2 36954035 36981267 18761 0 121533 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 45773 91023 43808703 43956228 43808703 0 0 0 0
`

func TestSnmpField(t *testing.T) {
	for _, tc := range []struct {
		proto, field string
		want         uint64
		err          string
	}{
		{"Tcp", "OutSegs", 36981267, ""},
		{"Tcp", "RetransSegs", 18761, ""},
		{"Udp", "OutDatagrams", 43956228, ""},
		{"Tcp", "NoSuch", 0, "no Tcp NoSuch in /proc/net/snmp"},
		{"Sctp", "OutSegs", 0, "no Sctp OutSegs in /proc/net/snmp"},
	} {
		got, err := snmpField(snmpSample, tc.proto, tc.field)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s %s: err %v, want %q", tc.proto, tc.field, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s %s = %d, %v; want %d", tc.proto, tc.field, got, err, tc.want)
		}
	}
	// The kernel's own file parses: the counter bridged() reads exists.
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		t.Skip(err)
	}
	if _, err := snmpField(string(b), "Tcp", "OutSegs"); err != nil {
		t.Errorf("this kernel's /proc/net/snmp: %v", err)
	}
}

func TestWirePackets(t *testing.T) {
	a := bridgedCount{ifStats{Packets: 100, Bytes: 10_000, Dropped: 3}, 40}
	tcp := bridgedCount{ifStats{Packets: 300, Bytes: 3_000_000, Dropped: 3}, 2_040} // 200 skbs, 2,000 segments
	udp := bridgedCount{ifStats{Packets: 50_100, Bytes: 2_000_000, Dropped: 9}, 40} // no TCP at all
	tcpDrop := tcp
	tcpDrop.Dropped = 4
	for _, tc := range []struct {
		name     string
		b        bridgedCount
		offloads bool
		want     uint64
		ok       bool
	}{
		{"offloads off: skbs are packets", tcp, false, 200, true},
		{"offloads on, TCP: its segments", tcp, true, 2_000, true},
		{"offloads on, TCP, a veth dropped an skb: unknown", tcpDrop, true, 2_000, false},
		{"offloads off, drops: the veths count what they passed", tcpDrop, false, 200, true},
		{"offloads on, no TCP: skbs", udp, true, 50_000, true},
		{"offloads off, UDP", udp, false, 50_000, true},
	} {
		if got, ok := wirePackets(a, tc.b, tc.offloads); got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestHookNs(t *testing.T) {
	progs := map[string]progStat{"tc_count": {RunNs: 300_000, RunCnt: 1000}, "tc_list": {RunNs: 120_000, RunCnt: 1000}}
	hooks := map[string][]string{
		"flbhc0/ingress": {"tc_count"}, "flbhs0/ingress": {"tc_count"},
		"flbhc0/egress": {"tc_list"}, "flbhs0/egress": {"tc_list"},
	}
	in, eg := hookNs(progs, hooks, 1000)
	if in != 300 || eg != 120 {
		t.Errorf("split: ingress %v egress %v, want 300 and 120", in, eg)
	}
	// One program at both directions: no split.
	both := map[string][]string{"flbhc0/ingress": {"tc_count", "tc_list"}, "flbhs0/egress": {"tc_list"}}
	if in, eg := hookNs(progs, both, 1000); in != 0 || eg != 0 {
		t.Errorf("program at both directions: %v, %v; want 0, 0", in, eg)
	}
	// A program that ran but was not seen at any hook: no split.
	if in, eg := hookNs(progs, map[string][]string{"flbhc0/ingress": {"tc_count"}}, 1000); in != 0 || eg != 0 {
		t.Errorf("program at no hook: %v, %v; want 0, 0", in, eg)
	}
	if in, eg := hookNs(progs, hooks, 0); in != 0 || eg != 0 {
		t.Errorf("no packets: %v, %v", in, eg)
	}
}

// TestHarnesses: the saturating harness is unpaced with offloads on, the
// fixed one keeps the flags' rates, and the titles say which.
func TestHarnesses(t *testing.T) {
	fs := flag.NewFlagSet("live", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s := sbsFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if strings.Join(s.harnesses, ",") != "fixed,saturating" {
		t.Errorf("default harnesses %v", s.harnesses)
	}
	fixed, sat := s.forHarness(harnessFixed), s.forHarness(harnessSaturating)
	if fixed.heyQKeep != 100 || fixed.heyQNew != 20 || fixed.udpPPS != 50000 || fixed.offloads {
		t.Errorf("fixed: %+v", fixed)
	}
	if sat.heyQKeep != 0 || sat.heyQNew != 0 || sat.udpPPS != 0 || !sat.offloads || sat.udpFlows != 50000 || sat.heyConc != 50 {
		t.Errorf("saturating: %+v", sat)
	}
	for _, tc := range []struct {
		s    sbsOptions
		w    string
		want string
	}{
		{fixed, "keepalive", "HTTP keep-alive (hey -c 50 -q 100)"},
		{fixed, "newconn", "HTTP new connection per request (hey -c 50 -disable-keepalive -q 20)"},
		{fixed, "udp", "UDP, 50000 flows cycled (50000 datagrams/s)"},
		{sat, "keepalive", "HTTP keep-alive (hey -c 50, unpaced)"},
		{sat, "newconn", "HTTP new connection per request (hey -c 50 -disable-keepalive, unpaced)"},
		{sat, "tcp", "one iperf3 TCP stream"},
		{sat, "udp", "UDP, 50000 flows cycled (unpaced)"},
	} {
		if got := tc.s.title(tc.w); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.s.harness, tc.w, got, tc.want)
		}
	}
	if err := fs.Parse([]string{"-harness", "saturating"}); err != nil || strings.Join(s.harnesses, ",") != "saturating" {
		t.Errorf("-harness saturating: %v, %v", s.harnesses, err)
	}
	if err := fs.Parse([]string{"-harness", "fixed,paced"}); err == nil || !strings.Contains(err.Error(), `unknown harness "paced" (fixed, saturating)`) {
		t.Errorf("-harness fixed,paced: %v", err)
	}
	for _, spec := range []string{"10.0.0.1:10:-1:1s", "10.0.0.1:0:0:1s", "nope:10:0:1s"} {
		if err := cycleUDP(spec); err == nil || !strings.HasPrefix(err.Error(), "bad -cycle-udp") {
			t.Errorf("cycleUDP(%q): %v", spec, err)
		}
	}
}

// TestSummarize: per workload, medians with min and max over the complete
// rounds, ratios taken per round, the hooks split, flowlens' exactness with
// unchecked bytes counted, and the client ratios against the round's mean
// none run.
func TestSummarize(t *testing.T) {
	s := sbsOptions{workloads: []string{"tcp"}, heyConc: 50, udpFlows: 50000}.forHarness(harnessSaturating)
	var runs []sbsRun
	// Three rounds: flowlens 260, 270, 280 ns (ingress 150+i, egress the
	// rest), NetObserv 360, 380, 350; clients 10 (none), 9.6/9.5 (agents).
	for i, x := range []struct{ fl, peer, none2 float64 }{{260, 360, 10}, {270, 380, 10.2}, {280, 350, 9.8}} {
		round := i + 1
		in := 150 + float64(i)
		fl := sbsRun{Harness: s.harness, Workload: "tcp", Round: round, Agent: agentFlowlens, Client: 9.6,
			TCNsPerPacket: x.fl, IngressNsPerPacket: in, EgressNsPerPacket: x.fl - in, CPUPerRecordUS: 1.5, MaxRSSMB: 28,
			ExactPackets: true, BytesUnchecked: i != 2, ExactBytes: i == 2}
		peer := sbsRun{Harness: s.harness, Workload: "tcp", Round: round, Agent: agentPeer, Client: 9.5,
			TCNsPerPacket: x.peer, IngressNsPerPacket: 200, EgressNsPerPacket: x.peer - 200, CPUPerRecordUS: 8.5, MaxRSSMB: 78,
			ExactPackets: i != 1}
		runs = append(runs,
			sbsRun{Workload: "tcp", Round: round, Agent: agentNone, Client: 10},
			fl, peer,
			sbsRun{Workload: "tcp", Round: round, Agent: agentNone, Client: x.none2})
	}
	// An incomplete fourth round (no second none run) counts in Rounds and
	// in the exactness columns only (its flowlens run: unchecked).
	runs = append(runs, sbsRun{Workload: "tcp", Round: 4, Agent: agentNone, Client: 10},
		sbsRun{Workload: "tcp", Round: 4, Agent: agentFlowlens, TCNsPerPacket: 1000, PacketsUnchecked: true, BytesUnchecked: true})
	sums := s.summarize(runs)
	if len(sums) != 1 {
		t.Fatalf("%d summaries", len(sums))
	}
	ws := sums[0]
	near := func(name string, got spread, med, lo, hi float64, n int) {
		t.Helper()
		d := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
		if !d(got.Med, med) || !d(got.Min, lo) || !d(got.Max, hi) || got.N != n {
			t.Errorf("%s: %+v, want %v (%v–%v) over %d", name, got, med, lo, hi, n)
		}
	}
	near("flowlens ns", ws.FlowlensNs, 270, 260, 280, 3)
	near("NetObserv ns", ws.PeerNs, 360, 350, 380, 3)
	near("ratio", ws.Ratio, 260.0/360, 270.0/380, 280.0/350, 3)
	near("flowlens ingress", ws.FlowlensInNs, 151, 150, 152, 3)
	near("flowlens egress", ws.FlowlensEgNs, 119, 110, 128, 3)
	near("NetObserv egress", ws.PeerEgNs, 160, 150, 180, 3)
	near("egress ratio", ws.EgressRatio, 110.0/160, 119.0/180, 128.0/150, 3)
	near("flowlens CPU", ws.FlowlensCPUUS, 1.5, 1.5, 1.5, 3)
	near("NetObserv RSS", ws.PeerRSSMB, 78, 78, 78, 3)
	near("client flowlens", ws.ClientFlowlens, 9.6/10, 9.6/10.1, 9.6/9.9, 3)
	near("client A/A", ws.ClientAA, 1, 0.98, 1.02, 3)
	if ws.FlowlensExact != 3 || ws.FlowlensUnchecked != 1 || ws.PeerExactPackets != 2 || ws.Rounds != 4 {
		t.Errorf("exact: flowlens %d (%d unchecked), NetObserv %d, rounds %d; want 3 (1), 2, 4",
			ws.FlowlensExact, ws.FlowlensUnchecked, ws.PeerExactPackets, ws.Rounds)
	}
	if ws.Harness != harnessSaturating || ws.Title != "one iperf3 TCP stream" {
		t.Errorf("harness %q title %q", ws.Harness, ws.Title)
	}
	// The summary goes into the JSON the plots read: no NaN may reach it.
	if _, err := json.Marshal(sums); err != nil {
		t.Error(err)
	}
}

func TestWarnings(t *testing.T) {
	log := `time=2026-11-28T15:00:00Z level=INFO msg=attached
time=2026-11-28T15:00:01Z level=WARN msg="collector unavailable: retrying with backoff"
{"time":"2026-11-28T15:00:02Z","level":"ERROR","msg":"flows the collector never acknowledged (lost)","flows":5000}
time="2026-11-28T15:00:03Z" level=warning msg="map full"
time=2026-11-28T15:00:04Z level=DEBUG msg=evicted
`
	got := warnings(log, 10)
	if len(got) != 3 || !strings.Contains(got[0], "retrying") || !strings.Contains(got[1], "never acknowledged") || !strings.Contains(got[2], "map full") {
		t.Errorf("warnings: %q", got)
	}
	if got := warnings(log, 1); len(got) != 1 || !strings.Contains(got[0], "map full") {
		t.Errorf("last one: %q", got)
	}
	if got := warnings("level=INFO msg=ok\n", 10); len(got) != 0 {
		t.Errorf("none: %q", got)
	}
}

// The counts of flowlens' "exporter stopped" line, as an agent whose sink
// was starved of CPU wrote it (bench-live with the sink in a cgroup at
// 0.5 % of a CPU: 80 batches dropped at a full queue, counted).
func TestExporterStopped(t *testing.T) {
	log := `time=2026-11-28T18:04:53.867Z level=WARN msg="export queue full: dropping the oldest batches (consumer slow or down)" exporter=grpc dropped_batches_total=1 dropped_flows_total=1000
time=2026-11-28T18:05:01.789Z level=INFO msg="exporter stopped" exporter=grpc exported_flows=20000 dropped_flows=80000 shutdown_lost_flows=0 failed_exports=0 failed_export_flows=0 failed_flows=0 acked_flows=20000 rejected_flows=0
time=2026-11-28T18:05:01.790Z level=INFO msg="flowlens-agent stopped: all hooks detached, flows flushed"
`
	c := exporterStopped(log, "grpc")
	if c["exported_flows"] != 20000 || c["dropped_flows"] != 80000 || c["acked_flows"] != 20000 || len(c) != 8 {
		t.Errorf("counts: %v", c)
	}
	if countedLost(c) != 80000 || handedToExporter(c) != 100000 {
		t.Errorf("lost %d of %d, want 80000 of 100000", countedLost(c), handedToExporter(c))
	}
	if c := exporterStopped(log, "kafka"); c != nil {
		t.Errorf("no kafka line: %v", c)
	}
}

// TestLossCounted: a flowlens run short of packets is "losses counted"
// only beside a loss the agent counted (its exporter's, or packets before
// the export); the overflow ring's records, an excess, NetObserv's runs and
// an unknown wire count never are.
func TestLossCounted(t *testing.T) {
	short := func(mod func(*sbsRun)) *sbsRun {
		r := &sbsRun{Agent: agentFlowlens, ExportedPackets: 90, LifeWirePackets: 100}
		mod(r)
		return r
	}
	for name, c := range map[string]struct {
		r    *sbsRun
		want bool
	}{
		"queue full":      {short(func(r *sbsRun) { r.AgentExport = map[string]uint64{"dropped_flows": 3} }), true},
		"ring lost":       {short(func(r *sbsRun) { r.AgentKernelLost = map[string]uint64{"overflow_lost_total": 1} }), true},
		"nothing counted": {short(func(r *sbsRun) { r.AgentExport = map[string]uint64{"exported_flows": 9} }), false},
		"ring records":    {short(func(r *sbsRun) { r.AgentKernelLost = map[string]uint64{"overflow_records_total": 5} }), false},
		"excess":          {short(func(r *sbsRun) { r.ExportedPackets = 101; r.AgentExport = map[string]uint64{"dropped_flows": 3} }), false},
		"exact":           {short(func(r *sbsRun) { r.ExactPackets = true; r.AgentExport = map[string]uint64{"dropped_flows": 3} }), false},
		"unchecked":       {short(func(r *sbsRun) { r.PacketsUnchecked = true; r.AgentExport = map[string]uint64{"dropped_flows": 3} }), false},
		"NetObserv":       {short(func(r *sbsRun) { r.Agent = agentPeer; r.AgentExport = map[string]uint64{"dropped_flows": 3} }), false},
	} {
		if got := lossCounted(c.r); got != c.want {
			t.Errorf("%s: lossCounted = %v, want %v", name, got, c.want)
		}
	}
}

package datapath_test

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature/registry"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/bpfrun"
	"github.com/flowlens/flowlens/internal/testkit/packet"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

func enableStats(t *testing.T) {
	t.Helper()
	c, err := datapath.EnableBPFStats()
	if err != nil {
		t.Fatalf("BPF_ENABLE_STATS: %v", err)
	}
	t.Cleanup(func() { c.Close() })
}

// A tiny program run through BPF_PROG_TEST_RUN: its run count, as scraped,
// grows by exactly the number of runs, and its run time grows.
func TestBPFProgramStatsExact(t *testing.T) {
	testkit.NeedRoot(t, "BPF")
	enableStats(t)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "stats_test",
		Type:         ebpf.SchedCLS,
		License:      "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	m := datapath.NewMetrics("flowlens_agent", datapath.MetricSources{
		Programs: func() []datapath.Program {
			return []datapath.Program{{Name: "stats_test", Attach: "test_run", Prog: prog}}
		},
		BPFStatsEnabled: func() bool { return true },
	}, nil)
	labels := []string{"attach=test_run", "program=stats_test"}

	f := promtest.Gather(t, m.Collectors()...)
	promtest.Expect(t, f, 0, "flowlens_agent_bpf_program_runs_total", labels...)
	promtest.Expect(t, f, 0, "flowlens_agent_bpf_program_run_time_seconds_total", labels...)

	pkt := make([]byte, 64)
	if _, err := bpfrun.Exactly(prog, pkt, 1000); err != nil {
		t.Fatal(err)
	}
	f = promtest.Gather(t, m.Collectors()...)
	promtest.Expect(t, f, 1000, "flowlens_agent_bpf_program_runs_total", labels...)
	rt1, _ := promtest.Value(f, "flowlens_agent_bpf_program_run_time_seconds_total", labels...)
	if rt1 <= 0 {
		t.Fatalf("run time %v after 1000 runs", rt1)
	}

	if _, err := bpfrun.Exactly(prog, pkt, 234); err != nil {
		t.Fatal(err)
	}
	f = promtest.Gather(t, m.Collectors()...)
	promtest.Expect(t, f, 1234, "flowlens_agent_bpf_program_runs_total", labels...)
	if rt2, _ := promtest.Value(f, "flowlens_agent_bpf_program_run_time_seconds_total", labels...); rt2 <= rt1 {
		t.Fatalf("run time did not grow: %v then %v", rt1, rt2)
	}
}

// udpPacket is an IPv4 UDP frame 10.0.0.1:sport → 10.0.0.2:53, no payload.
func udpPacket(sport uint16) []byte {
	return packet.Cat(packet.Eth(packet.EtherTypeIPv4),
		packet.IPv4(packet.ProtoUDP, "10.0.0.1", "10.0.0.2", packet.UDPLen),
		packet.UDP(sport, 53, 0))
}

// The real datapath: the TC program's run count (summed over its
// per-namespace instances) follows the packets exactly, and the datapath's
// counters and maps are exported. One TC set per namespace (the fallback),
// so that there are instances to sum.
func TestDatapathMetrics(t *testing.T) {
	testkit.NeedRoot(t, "BPF")
	enableStats(t)
	dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1, Enrichment: true, ForcePerNamespacePrograms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	all, err := registry.Plans()
	if err != nil {
		t.Fatal(err)
	}
	hooks := dp.StartHooks(all)
	m := datapath.NewMetrics("flowlens_agent", datapath.MetricSources{
		Counters:        dp.ReadCounters,
		FlowMapCapacity: 64,
		Attached:        dp.Attached,
		Hooks:           datapath.MetricHooks(dp),
		Programs:        datapath.MetricPrograms(dp),
		Maps:            datapath.MetricMaps(&dp.Maps),
		EnrichmentLost:  dp.ReadEnrichmentLost,
	}, nil)
	ingress := []string{"attach=tc_ingress", "program=flowlens_ingress"}
	egress := []string{"attach=tc_egress", "program=flowlens_egress"}

	// Two instances: the one Load makes (cookie 0) and one more namespace's.
	p0, err := dp.ProgramsFor(0)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := dp.ProgramsFor(0xc0ffee)
	if err != nil {
		t.Fatal(err)
	}
	// The second namespace's lo has its zone, as the agent gives it before
	// attaching there; the first (cookie 0, none) has the default, 255.
	if err := dp.Maps.SetZones(0xc0ffee, datapath.Zones{Lo: 1}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		p     *ebpf.Program
		sport uint16
		n     uint32
	}{{p0.Ingress, 1000, 7}, {p1.Ingress, 1000, 5}, {p1.Ingress, 2000, 3}} {
		if _, err := bpfrun.Exactly(r.p, udpPacket(r.sport), int(r.n)); err != nil {
			t.Fatal(err)
		}
	}
	f := promtest.Gather(t, m.Collectors()...)
	promtest.Expect(t, f, 15, "flowlens_agent_bpf_program_runs_total", ingress...)
	promtest.Expect(t, f, 2, "flowlens_agent_bpf_program_instances", ingress...)
	promtest.Expect(t, f, 0, "flowlens_agent_bpf_program_runs_total", egress...)
	promtest.Expect(t, f, 2, "flowlens_agent_bpf_program_instances", egress...)
	if rt, _ := promtest.Value(f, "flowlens_agent_bpf_program_run_time_seconds_total", ingress...); rt <= 0 {
		t.Errorf("ingress run time %v", rt)
	}
	// Three flows: two 5-tuples, the first on two namespaces' loopback
	// (test-run packets are on loopback), whose zones keep them apart.
	promtest.Expect(t, f, 3, "flowlens_agent_flows_created_total")
	promtest.Expect(t, f, 3, "flowlens_agent_flow_map_entries")
	promtest.Expect(t, f, 64, "flowlens_agent_flow_map_capacity")
	promtest.Expect(t, f, 0, "flowlens_agent_malformed_packets_total", "reason=truncated")
	promtest.Expect(t, f, 0, "flowlens_agent_malformed_packets_total", "reason=invalid")
	promtest.Expect(t, f, 0, "flowlens_agent_attached_interfaces")
	if _, ok := promtest.Value(f, "flowlens_agent_enrichment_lost_total"); !ok { // its value depends on the machine's other drops
		t.Error("flowlens_agent_enrichment_lost_total missing")
	}
	for _, name := range []string{"flows_a", "flows_b", "control", "counters", "overflow"} {
		if v, ok := promtest.Value(f, "flowlens_agent_bpf_map_memory_bytes", "map="+name); !ok || v <= 0 {
			t.Errorf("map %s memory: %v (present: %v)", name, v, ok)
		}
	}
	// Every map has its series, an empty one too: filter_addr, an LPM
	// trie with no rule, reports 0 bytes, and that is no read error.
	for _, e := range dp.Maps.All() {
		if _, ok := promtest.Value(f, "flowlens_agent_bpf_map_memory_bytes", "map="+e.Name); !ok {
			t.Errorf("map %s: no memory series", e.Name)
		}
	}
	promtest.Expect(t, f, 0, "flowlens_agent_bpf_map_memory_bytes", "map=filter_addr")
	if v, ok := promtest.Value(f, "flowlens_agent_metrics_read_errors_total", "source=bpf_map_memory"); ok {
		t.Errorf("map memory read errors: %v", v)
	}
	if v, _ := promtest.Value(f, "flowlens_agent_bpf_map_memory_bytes", "map=overflow"); v < 1<<20 {
		t.Errorf("overflow ring buffer memory %v < its 1 MiB", v)
	}

	// Enrichment hooks: status per hook, and each running program's cost
	// under its attach point.
	promtest.Expect(t, f, 1, "flowlens_agent_hook_up", "hook=tc")
	attach := map[string]string{
		"drop_kfree_skb": "tp_btf/kfree_skb", "drop_tracepoint": "tracepoint/skb/kfree_skb",
		"rtt_fentry": "fentry/tcp_rcv_established", "rtt_tcp_probe": "tp_btf/tcp_probe",
		"retransmit": "tp_btf/tcp_retransmit_skb", "tcp_state": "tp_btf/inet_sock_set_state",
	}
	for _, h := range hooks {
		promtest.Expect(t, f, map[bool]float64{true: 1, false: 0}[h.Running], "flowlens_agent_hook_up", "hook="+h.Name)
		if !h.Running {
			t.Logf("hook %s unavailable here: %v", h.Name, h.Err)
			continue
		}
		promtest.Expect(t, f, 1, "flowlens_agent_bpf_program_instances", "attach="+attach[h.Program], "program="+h.Program)
		if _, ok := promtest.Value(f, "flowlens_agent_bpf_program_runs_total", "attach="+attach[h.Program], "program="+h.Program); !ok {
			t.Errorf("no run count for hook program %s", h.Program)
		}
	}
	for _, name := range []string{"enrich_a", "enrich_b"} {
		if v, ok := promtest.Value(f, "flowlens_agent_bpf_map_memory_bytes", "map="+name); !ok || v <= 0 {
			t.Errorf("map %s memory: %v (present: %v)", name, v, ok)
		}
	}

	// More traffic: the counts move by exactly that much.
	if _, err := bpfrun.Exactly(p0.Ingress, udpPacket(1000), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := p0.Egress.Run(&ebpf.RunOptions{Data: udpPacket(1000), Repeat: 1}); err != nil {
		t.Fatal(err)
	}
	f = promtest.Gather(t, m.Collectors()...)
	promtest.Expect(t, f, 115, "flowlens_agent_bpf_program_runs_total", ingress...)
	promtest.Expect(t, f, 1, "flowlens_agent_bpf_program_runs_total", egress...)
}

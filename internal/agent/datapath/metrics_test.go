package datapath_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

type fakeProg struct {
	runtime time.Duration
	runs    uint64
	err     error
}

func (p *fakeProg) Stats() (*ebpf.ProgramStats, error) {
	if p.err != nil {
		return nil, p.err
	}
	return &ebpf.ProgramStats{Runtime: p.runtime, RunCount: p.runs}, nil
}

// Every source feeds its metrics with exact values, read at scrape time.
func TestMetricsExactValues(t *testing.T) {

	cnt := datapath.Counters{}
	cnt[datapath.CounterNonIP] = 11
	cnt[datapath.CounterMalformed] = 3
	cnt[datapath.CounterTruncated] = 5
	cnt[datapath.CounterIfacesOverflow] = 1
	cnt[datapath.CounterOverflowRecords] = 40
	cnt[datapath.CounterOverflowLost] = 4
	cnt[datapath.CounterNewFlows] = 500
	var cntErr error

	ing1, ing2 := &fakeProg{runtime: 1500 * time.Millisecond, runs: 100}, &fakeProg{runtime: 500 * time.Millisecond, runs: 50}
	egr := &fakeProg{runtime: time.Second, runs: 30}
	progs := []datapath.Program{
		{Name: "flowlens_ingress", Attach: "tc_ingress", Prog: ing1},
		{Name: "flowlens_ingress", Attach: "tc_ingress", Prog: ing2},
		{Name: "flowlens_egress", Attach: "tc_egress", Prog: egr},
	}

	m := datapath.NewMetrics("flowlens_agent", datapath.MetricSources{
		Counters:        func() (datapath.Counters, error) { return cnt, cntErr },
		FlowMapCapacity: 1000,
		Attached:        func() int { return 4 },
		Hooks:           func() map[string]bool { return map[string]bool{"tc": true, "drops": false} },
		Programs:        func() []datapath.Program { return progs },
		Maps: func() []datapath.Map {
			return []datapath.Map{{Name: "flows_a", Memory: func() (uint64, error) { return 4096, nil }}}
		},
		BPFStatsEnabled: func() bool { return true },
		EnrichmentLost:  func() (uint64, error) { return 13, nil },
	}, slog.New(slog.DiscardHandler))

	f := promtest.Gather(t, m.Collectors()...)
	promtest.Expect(t, f, 500, "flowlens_agent_flow_map_entries") // no eviction yet: every created flow is in the map
	promtest.Expect(t, f, 1000, "flowlens_agent_flow_map_capacity")
	promtest.Expect(t, f, 500, "flowlens_agent_flows_created_total")
	promtest.Expect(t, f, 40, "flowlens_agent_overflow_records_total")
	promtest.Expect(t, f, 4, "flowlens_agent_overflow_lost_total")
	promtest.Expect(t, f, 1, "flowlens_agent_interfaces_overflow_flows_total")
	promtest.Expect(t, f, 11, "flowlens_agent_non_ip_packets_total")
	promtest.Expect(t, f, 3, "flowlens_agent_malformed_packets_total", "reason=invalid")
	promtest.Expect(t, f, 5, "flowlens_agent_malformed_packets_total", "reason=truncated")
	promtest.Expect(t, f, 4, "flowlens_agent_attached_interfaces")
	promtest.Expect(t, f, 1, "flowlens_agent_hook_up", "hook=tc")
	promtest.Expect(t, f, 0, "flowlens_agent_hook_up", "hook=drops")
	promtest.Expect(t, f, 13, "flowlens_agent_enrichment_lost_total")
	promtest.Expect(t, f, 150, "flowlens_agent_bpf_program_runs_total", "attach=tc_ingress", "program=flowlens_ingress")
	promtest.Expect(t, f, 2, "flowlens_agent_bpf_program_run_time_seconds_total", "attach=tc_ingress", "program=flowlens_ingress")
	promtest.Expect(t, f, 2, "flowlens_agent_bpf_program_instances", "attach=tc_ingress", "program=flowlens_ingress")
	promtest.Expect(t, f, 30, "flowlens_agent_bpf_program_runs_total", "attach=tc_egress", "program=flowlens_egress")
	promtest.Expect(t, f, 4096, "flowlens_agent_bpf_map_memory_bytes", "map=flows_a")
	promtest.Expect(t, f, 1, "flowlens_agent_bpf_stats_enabled")
	if _, ok := promtest.Value(f, "flowlens_agent_metrics_read_errors_total", "source=datapath_counters"); ok {
		t.Error("read errors reported without any")
	}

	// An eviction (observed as the evictor's Observer): the map's fill
	// restarts from there.
	m.ObserveEviction(evictor.ReasonTimer, 480, 3*time.Millisecond)
	m.ObserveEviction(evictor.ReasonPressure, 20, 30*time.Millisecond)
	cnt[datapath.CounterNewFlows] = 620
	// An instance unloaded (its namespace went away), another ran more:
	// the sums never go down.
	progs = progs[1:]
	ing2.runs, ing2.runtime = 60, 600*time.Millisecond

	f = promtest.Gather(t, m.Collectors()...)
	promtest.Expect(t, f, 120, "flowlens_agent_flow_map_entries")
	promtest.Expect(t, f, 160, "flowlens_agent_bpf_program_runs_total", "attach=tc_ingress", "program=flowlens_ingress")
	promtest.Expect(t, f, 2.1, "flowlens_agent_bpf_program_run_time_seconds_total", "attach=tc_ingress", "program=flowlens_ingress")
	promtest.Expect(t, f, 1, "flowlens_agent_bpf_program_instances", "attach=tc_ingress", "program=flowlens_ingress")

	// A source failing: its metrics go, the rest stays, the error counts.
	cntErr = errors.New("map gone")
	ing2.err = errors.New("prog gone")
	f = promtest.Gather(t, m.Collectors()...)
	if _, ok := promtest.Value(f, "flowlens_agent_non_ip_packets_total"); ok {
		t.Error("counters served although reading them failed")
	}
	promtest.Expect(t, f, 1, "flowlens_agent_metrics_read_errors_total", "source=datapath_counters")
	promtest.Expect(t, f, 1, "flowlens_agent_metrics_read_errors_total", "source=bpf_program_stats")
	promtest.Expect(t, f, 160, "flowlens_agent_bpf_program_runs_total", "attach=tc_ingress", "program=flowlens_ingress")
	promtest.Expect(t, f, 4, "flowlens_agent_attached_interfaces")

}

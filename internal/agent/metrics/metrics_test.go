package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/agent/metrics"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// scrape GETs /metrics from a running server and parses it.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

var (
	value  = promtest.Value
	expect = promtest.Expect
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

func serve(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	srv, err := m.Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return "http://" + srv.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Every source feeds its metrics with exact values, read at scrape time
// (the exporters' and the evictor's own: exporter.TestCollectorExactValues,
// evictor.TestMetricsExactValues).
func TestScrapeExactValues(t *testing.T) {

	cnt := metrics.Counters{}
	cnt[datapath.CounterNonIP] = 11
	cnt[datapath.CounterMalformed] = 3
	cnt[datapath.CounterIfacesOverflow] = 1
	cnt[datapath.CounterOverflowRecords] = 40
	cnt[datapath.CounterOverflowLost] = 4
	cnt[datapath.CounterNewFlows] = 500
	var cntErr error

	ing1, ing2 := &fakeProg{runtime: 1500 * time.Millisecond, runs: 100}, &fakeProg{runtime: 500 * time.Millisecond, runs: 50}
	egr := &fakeProg{runtime: time.Second, runs: 30}
	progs := []metrics.Program{
		{Name: "flowlens_ingress", Attach: "tc_ingress", Prog: ing1},
		{Name: "flowlens_ingress", Attach: "tc_ingress", Prog: ing2},
		{Name: "flowlens_egress", Attach: "tc_egress", Prog: egr},
	}
	ready := errors.New("attaching")

	m, err := metrics.New(metrics.Sources{
		Counters:        func() (metrics.Counters, error) { return cnt, cntErr },
		FlowMapCapacity: 1000,
		Attached:        func() int { return 4 },
		Hooks:           func() map[string]bool { return map[string]bool{"tc": true, "drops": false} },
		Programs:        func() []metrics.Program { return progs },
		Maps: func() []metrics.Map {
			return []metrics.Map{{Name: "flows_a", Memory: func() (uint64, error) { return 4096, nil }}}
		},
		BPFStatsEnabled: func() bool { return true },
		EnrichmentLost:  func() (uint64, error) { return 13, nil },
	}, metrics.Options{Ready: func() error { return ready }})
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, m)

	f := scrape(t, base)
	expect(t, f, 500, "flowlens_agent_flow_map_entries") // no eviction yet: every created flow is in the map
	expect(t, f, 1000, "flowlens_agent_flow_map_capacity")
	expect(t, f, 500, "flowlens_agent_flows_created_total")
	expect(t, f, 40, "flowlens_agent_overflow_records_total")
	expect(t, f, 4, "flowlens_agent_overflow_lost_total")
	expect(t, f, 1, "flowlens_agent_interfaces_overflow_flows_total")
	expect(t, f, 11, "flowlens_agent_non_ip_packets_total")
	expect(t, f, 3, "flowlens_agent_malformed_packets_total")
	expect(t, f, 4, "flowlens_agent_attached_interfaces")
	expect(t, f, 1, "flowlens_agent_hook_up", "hook=tc")
	expect(t, f, 0, "flowlens_agent_hook_up", "hook=drops")
	expect(t, f, 13, "flowlens_agent_enrichment_lost_total")
	expect(t, f, 150, "flowlens_agent_bpf_program_runs_total", "attach=tc_ingress", "program=flowlens_ingress")
	expect(t, f, 2, "flowlens_agent_bpf_program_run_time_seconds_total", "attach=tc_ingress", "program=flowlens_ingress")
	expect(t, f, 2, "flowlens_agent_bpf_program_instances", "attach=tc_ingress", "program=flowlens_ingress")
	expect(t, f, 30, "flowlens_agent_bpf_program_runs_total", "attach=tc_egress", "program=flowlens_egress")
	expect(t, f, 4096, "flowlens_agent_bpf_map_memory_bytes", "map=flows_a")
	expect(t, f, 1, "flowlens_agent_bpf_stats_enabled")
	if _, ok := value(f, "go_goroutines"); !ok {
		t.Error("go runtime metrics missing")
	}
	if _, ok := value(f, "flowlens_agent_metrics_read_errors_total", "source=datapath_counters"); ok {
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

	f = scrape(t, base)
	expect(t, f, 120, "flowlens_agent_flow_map_entries")
	expect(t, f, 160, "flowlens_agent_bpf_program_runs_total", "attach=tc_ingress", "program=flowlens_ingress")
	expect(t, f, 2.1, "flowlens_agent_bpf_program_run_time_seconds_total", "attach=tc_ingress", "program=flowlens_ingress")
	expect(t, f, 1, "flowlens_agent_bpf_program_instances", "attach=tc_ingress", "program=flowlens_ingress")

	// A source failing: its metrics go, the rest stays, the error counts.
	cntErr = errors.New("map gone")
	ing2.err = errors.New("prog gone")
	f = scrape(t, base)
	if _, ok := value(f, "flowlens_agent_non_ip_packets_total"); ok {
		t.Error("counters served although reading them failed")
	}
	expect(t, f, 1, "flowlens_agent_metrics_read_errors_total", "source=datapath_counters")
	expect(t, f, 1, "flowlens_agent_metrics_read_errors_total", "source=bpf_program_stats")
	expect(t, f, 160, "flowlens_agent_bpf_program_runs_total", "attach=tc_ingress", "program=flowlens_ingress")
	expect(t, f, 4, "flowlens_agent_attached_interfaces")

	// Health and readiness.
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "attaching") {
		t.Errorf("/readyz before ready: %d %q", code, body)
	}
	ready = nil
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz when ready: %d", code)
	}
}

func TestReadyWhenClosed(t *testing.T) {
	ch := make(chan struct{})
	r := metrics.ReadyWhenClosed(ch)
	if r() == nil {
		t.Fatal("ready before the channel closed")
	}
	close(ch)
	if err := r(); err != nil {
		t.Fatal(err)
	}
}

func TestListenBusyAddressFails(t *testing.T) {
	m, err := metrics.New(metrics.Sources{}, metrics.Options{NoRuntimeMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := m.Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	if _, err := m.Listen(srv.Addr().String(), ""); err == nil {
		t.Fatal("second Listen on a busy address succeeded")
	}
}

package evictor_test

import (
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// The evictor's counts with exact values, read at scrape time, and the
// durations it observes, by reason (each reason at 0 from the start).
func TestMetricsExactValues(t *testing.T) {
	var ev evictor.Stats
	ev.Evictions[0].Store(7)
	ev.Evictions[1].Store(2)
	ev.Flows.Store(1234)
	ev.OverflowFlows.Store(5)
	ev.PartialFlows.Store(8)
	ev.ReadFailures.Store(2)
	ev.LostPackets[evictor.LostOverflowAggregationFull].Store(41)
	m := evictor.NewMetrics("flowlens_agent", &ev)

	f := promtest.Gather(t, m.Collectors()...)
	promtest.Expect(t, f, 7, "flowlens_agent_evictions_total", "reason=timer")
	promtest.Expect(t, f, 2, "flowlens_agent_evictions_total", "reason=pressure")
	promtest.Expect(t, f, 0, "flowlens_agent_evictions_total", "reason=shutdown")
	promtest.Expect(t, f, 1234, "flowlens_agent_evicted_flows_total", "source=map")
	promtest.Expect(t, f, 5, "flowlens_agent_evicted_flows_total", "source=overflow")
	promtest.Expect(t, f, 8, "flowlens_agent_evicted_flows_total", "source=partial")
	promtest.Expect(t, f, 2, "flowlens_agent_eviction_read_failures_total")
	promtest.Expect(t, f, 41, "flowlens_agent_lost_packets_total", "reason=overflow_aggregation_full")
	promtest.Expect(t, f, 0, "flowlens_agent_eviction_duration_seconds", "reason=timer")

	var _ evictor.Observer = m
	m.ObserveEviction(evictor.ReasonTimer, 480, 3*time.Millisecond)
	m.ObserveEviction(evictor.ReasonPressure, 20, 30*time.Millisecond)
	ev.Evictions[0].Add(1)
	f = promtest.Gather(t, m.Collectors()...)
	promtest.Expect(t, f, 1, "flowlens_agent_eviction_duration_seconds", "reason=timer")
	promtest.Expect(t, f, 1, "flowlens_agent_eviction_duration_seconds", "reason=pressure")
	promtest.Expect(t, f, 0, "flowlens_agent_eviction_duration_seconds", "reason=shutdown")
	promtest.Expect(t, f, 8, "flowlens_agent_evictions_total", "reason=timer")
}

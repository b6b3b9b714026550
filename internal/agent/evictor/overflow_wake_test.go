package evictor_test

import (
	"context"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/testkit"
)

// The overflow aggregation asks for an eviction once it holds half its
// bound, so that it is drained before it refuses flows. A flow map of 2
// flows, an aggregation of 8, a period of an hour and the pressure check
// set for a map it never fills: two flows fill the map and four go
// through the ring, and the fourth starts an eviction (reason pressure)
// that hands on the six, each packet once, nothing lost.
func TestOverflowAggAsksForEviction(t *testing.T) {
	testkit.NeedRoot(t, "BPF")
	// The pressure check's map is one it never fills (MaxFlows).
	r := newOverflowRigWith(t, func(c *evictor.Config) { c.MaxFlows, c.OverflowMaxFlows = 1<<20, 8 })
	ev, progs, g := r.ev, r.progs, r.g
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ev.Run(ctx) }()
	for port := uint16(1); port <= 6; port++ {
		r.run(t, progs.Ingress, port, 0)
	}
	for deadline := time.Now().Add(20 * time.Second); ev.Stats.Evictions[1].Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no eviction 20 s after 4 flows reached the aggregation of 8 (overflow flows so far %d)",
				ev.Stats.OverflowFlows.Load())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := ev.Shutdown(); err != nil {
		t.Fatal(err)
	}
	st := ev.Stats
	if st.Evictions[0].Load() != 0 || st.Evictions[1].Load() != 1 || st.OverflowFlows.Load() != 4 || st.Flows.Load() != 2 {
		t.Errorf("evictions timer %d pressure %d, flows %d from the map and %d from the ring; want 0, 1, 2 and 4",
			st.Evictions[0].Load(), st.Evictions[1].Load(), st.Flows.Load(), st.OverflowFlows.Load())
	}
	if ring, lost := r.ring(t); ring != 4 || lost != 0 || st.LostRecords[evictor.LostOverflowAggregationFull].Load() != 0 {
		t.Errorf("ring records %d, lost %d, refused by the aggregation %d; want 4, 0 and 0",
			ring, lost, st.LostRecords[evictor.LostOverflowAggregationFull].Load())
	}
	for port := uint16(1); port <= 6; port++ {
		if g.packets[port] != 1 {
			t.Errorf("flow from port %d: %d packets exported, want 1", port, g.packets[port])
		}
	}
	if len(g.packets) != 6 {
		t.Errorf("flows exported %v, want 6", g.packets)
	}
}

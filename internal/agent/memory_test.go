package agent_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// With a memory limit too small for anything, every bound is at its
// floor: the overflow aggregation takes 1024 flows a period and the export
// queue one batch (--export-buffer lowered, logged). A burst of new flows
// far beyond the flow map and the aggregation loses packets at the bound,
// counted, and the agent keeps running: the packets it printed plus those
// it counted as lost (at the bound, and by the kernel with the ring full)
// are exactly those the veth delivered to its hook.
func TestMemoryBoundsAtTheFloor(t *testing.T) {
	const flows = 20000
	p := agenttest.NewPair(t)
	// A neighbour that does not exist: the peer's stack drops the frames
	// (another host's MAC) after its hook saw them, and answers nothing.
	netlab.Neigh(t, p.A, p.IfA, "10.99.0.9", net.HardwareAddr{2, 0, 0, 0, 0xf1, 0})
	h := agenttest.Start(t, 1, agent.Options{MemoryLimit: 1}, "--netns="+p.B.Name, "--interfaces="+p.IfB,
		"--cache-max-flows=64", "--export-buffer=8")
	if b := h.A.Memory; b.OverflowMaxFlows != 1024 || b.ExportBatches != 1 || b.GoLimit != 0 {
		t.Fatalf("budget %v: want the floors", b)
	}
	if !strings.Contains(h.Log(), "--export-buffer lowered to fit the memory limit") {
		t.Error("the lowered --export-buffer was not logged")
	}
	rx0, _, _, _ := netlab.LinkStats(p.B, p.IfB)
	err := p.A.Do(func() error {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(p.IPA)})
		if err != nil {
			return err
		}
		defer c.Close()
		for i := range flows {
			if _, err := c.WriteToUDP([]byte("x"), &net.UDPAddr{IP: net.ParseIP("10.99.0.9"), Port: 1 + i}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rx, _, _, _ := netlab.LinkStats(p.B, p.IfB)
		if rx-rx0 == flows {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("veth delivered %d packets, want %d", rx-rx0, flows)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The kernel's count is final once the traffic has passed; the
	// agent's, once it has stopped (its last eviction drains the ring).
	ringFull, _ := promtest.Value(promtest.GatherFrom(t, h.A.Metrics.Registry()), "flowlens_agent_overflow_lost_total")
	delivered, _, _ := agenttest.Sum(h.Stop(), agenttest.Match{})
	atBound := h.A.Evictor.Stats.LostPackets[evictor.LostOverflowAggregationFull].Load()
	t.Logf("%d new flows: %d packets delivered, %d lost at the aggregation's bound, %.0f with the ring full",
		flows, delivered, atBound, ringFull)
	if atBound == 0 {
		t.Error("nothing lost at the bound: the burst did not reach it")
	}
	if got := delivered + atBound + uint64(ringFull); got != flows {
		t.Errorf("delivered %d + lost %d + %.0f = %d, want %d", delivered, atBound, ringFull, got, flows)
	}
}

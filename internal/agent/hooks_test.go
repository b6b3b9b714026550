package agent_test

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
)

// Every enrichment hook runs here, each through the candidate this kernel
// accepts (fentry is refused on this machine, so RTT runs on tcp_probe);
// with --features=none no hook is loaded and the enrichment maps hold one
// entry each.
func TestHooksStatusAndFeaturesNone(t *testing.T) {
	p := agenttest.NewPair(t)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg())
	for _, name := range []string{"drops", "rtt", "retransmits"} {
		st := h.HookStatus(name)
		if !st.Running || st.Err != nil {
			t.Fatalf("hook %s: %+v", name, st)
		}
		t.Logf("%s runs %s", name, st.Program)
	}
	h.Stop()

	h2 := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=none")
	if hs := h2.A.DP.Hooks(); len(hs) != 0 {
		t.Fatalf("hooks with --features=none: %+v", hs)
	}
	for _, m := range h2.A.DP.Maps.Enrich {
		if m.MaxEntries() != 1 {
			t.Fatalf("enrichment map has %d entries with every feature off, want 1", m.MaxEntries())
		}
	}
	h2.Stop()
}

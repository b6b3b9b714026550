package agenttest

import (
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// Start returns a ready agent whose log is kept; Stop mid-test flushes the
// flows still in the kernel (the active timeout is an hour) and a second
// Stop, the test's cleanup's, only returns them again.
func TestStartLogStop(t *testing.T) {
	netlab.Require(t)
	p := NewPair(t)
	h := Start(t, 2, agent.Options{}, p.NetnsArg(), "--cache-active-timeout=1h")
	select {
	case <-h.A.Ready():
	default:
		t.Fatal("Start returned before the agent was ready")
	}
	for _, ifc := range []string{p.IfA, p.IfB} {
		if !strings.Contains(h.Log(), "msg=attached interface="+ifc+" ") {
			t.Errorf("the log does not say %s was attached:\n%s", ifc, h.Log())
		}
	}
	p.Transfer(t, 9000, 100_000)
	if out := h.Output(); out != "" {
		t.Fatalf("flows printed before Stop, with an hour's active timeout:\n%s", out)
	}
	flows := h.Stop()
	if packets, _, _ := Sum(flows, Match{Src: p.IPA, Dst: p.IPB, Dport: 9000, Proto: 6}); packets == 0 {
		t.Errorf("Stop returned no packets of the transfer: %d flows", len(flows))
	}
	if again := h.Stop(); len(again) != len(flows) {
		t.Errorf("a second Stop returned %d flows, the first %d", len(again), len(flows))
	}
}

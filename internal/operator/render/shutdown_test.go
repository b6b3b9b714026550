package render

import (
	"testing"
	"time"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
)

// The agent DaemonSet's grace period covers the agent's worst-case
// shutdown (every budget it spends, from internal/agent/config) with the
// margin: the kubelet never kills an agent still flushing its exporters.
func TestAgentGracePeriodCoversWorstCaseShutdown(t *testing.T) {
	objs, err := Build(collector(v1alpha1.FlowCollectorSpec{}), Options{DefaultImage: "img"})
	if err != nil {
		t.Fatal(err)
	}
	p := objs.DaemonSet.Spec.Template.Spec.TerminationGracePeriodSeconds
	if p == nil {
		t.Fatal("no terminationGracePeriodSeconds rendered")
	}
	grace := time.Duration(*p) * time.Second
	worst := config.ShutdownWorstCase()
	if grace < worst+AgentShutdownMargin || grace >= worst+AgentShutdownMargin+time.Second {
		t.Errorf("terminationGracePeriodSeconds %v, want the worst-case shutdown %v plus the margin %v, rounded up", grace, worst, AgentShutdownMargin)
	}
	if grace <= worst {
		t.Errorf("terminationGracePeriodSeconds %v not longer than the agent's worst-case shutdown %v", grace, worst)
	}
	// The budgets themselves: the export flush is the larger part, and the
	// worst case is their sum (27 s today, a grace period of 34 s).
	if got := config.ShutdownPushWait + config.ExportShutdownBudget + config.ExportCloseGrace +
		config.MetricsShutdownWait + config.ShutdownKernelAllowance; worst != got {
		t.Errorf("worst case %v, want the sum of the budgets %v", worst, got)
	}
	if *p != 34 {
		t.Errorf("terminationGracePeriodSeconds %d, want 34 (manifests/flowlens-agent-daemonset.yaml says so)", *p)
	}
}

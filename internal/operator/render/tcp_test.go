package render

import (
	"slices"
	"testing"

	"github.com/flowlens/flowlens/api/v1alpha1"
)

// TestAgentConfigTCP: spec.agent.features takes tcp, and the agent reads
// it back enabled; without features the operator's default is the agent's
// own (the registry's), which has tcp (issue #30: on by default).
func TestAgentConfigTCP(t *testing.T) {
	c := loadAgentConfig(t, v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{
		Features: []v1alpha1.Feature{v1alpha1.FeatureDrops, v1alpha1.FeatureTCP}}})
	if !slices.Equal(c.Features, []string{"drops", "tcp"}) {
		t.Errorf("agent features %v, want [drops tcp]", c.Features)
	}
	if !slices.Contains(v1alpha1.DefaultFeatures, v1alpha1.FeatureTCP) {
		t.Errorf("default features %v: no tcp", v1alpha1.DefaultFeatures)
	}
	var want []string
	for _, f := range v1alpha1.DefaultFeatures {
		want = append(want, string(f))
	}
	if c := loadAgentConfig(t, v1alpha1.FlowCollectorSpec{}); !slices.Equal(c.Features, want) {
		t.Errorf("default features %v, want the agent's %v", c.Features, want)
	}
}

package flowquery

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The namespace of either end's pod or Service; never of a flow the
// collector did not enrich.
func TestNamespace(t *testing.T) {
	f, plain := base(), base()
	plain.Enriched = false
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{Namespace: []string{"data"}}, f, true},
		{&flowv1.FlowFilter{Namespace: []string{"kube-system", "shop"}}, f, true},
		{&flowv1.FlowFilter{Namespace: []string{"kube-system"}}, f, false},
		{&flowv1.FlowFilter{Namespace: []string{"data"}}, plain, false},
	})
}

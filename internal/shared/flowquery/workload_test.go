package flowquery

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The workload of either end, by name or namespace/name, not its pod's
// name.
func TestWorkload(t *testing.T) {
	f, plain := base(), base()
	plain.Enriched = false
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{Workload: []string{"shop/web", "x"}}, f, true},
		{&flowv1.FlowFilter{Workload: []string{"db"}}, f, true},
		{&flowv1.FlowFilter{Workload: []string{"data/web"}}, f, false},
		{&flowv1.FlowFilter{Workload: []string{"web-1"}}, f, false},
		{&flowv1.FlowFilter{Workload: []string{"web"}}, plain, false},
	})
}

package flowquery

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The observing agent's node, not the node an end runs on.
func TestNode(t *testing.T) {
	f := base()
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{Node: []string{"node-a"}}, f, true},
		{&flowv1.FlowFilter{Node: []string{"x", "node-a"}}, f, true},
		{&flowv1.FlowFilter{Node: []string{"n"}}, f, false},
	})
}

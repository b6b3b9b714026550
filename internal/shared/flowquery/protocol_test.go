package flowquery

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The IP protocol number.
func TestProtocol(t *testing.T) {
	f := base()
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{Protocol: []uint32{17}}, f, false},
		{&flowv1.FlowFilter{Protocol: []uint32{17, 6}}, f, true},
	})
}

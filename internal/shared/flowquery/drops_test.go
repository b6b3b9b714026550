package flowquery

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// Flows with dropped packets.
func TestDrops(t *testing.T) {
	f, clean := base(), base()
	clean.DropPackets, clean.DropCause = 0, ""
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{Drops: true}, f, true},
		{&flowv1.FlowFilter{Drops: true}, clean, false},
	})
}

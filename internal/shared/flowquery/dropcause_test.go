package flowquery

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The drop cause, in any case; it implies dropped packets.
func TestDropCause(t *testing.T) {
	f, stale := base(), base()
	stale.DropPackets = 0 // a cause without drops: not a dropping flow
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{DropCause: []string{"NO_SOCKET"}}, f, false},
		{&flowv1.FlowFilter{DropCause: []string{"netfilter_drop"}}, f, true},
		{&flowv1.FlowFilter{DropCause: []string{"NO_SOCKET", "NETFILTER_DROP"}}, f, true},
		{&flowv1.FlowFilter{DropCause: []string{"NETFILTER_DROP"}}, stale, false},
	})
}

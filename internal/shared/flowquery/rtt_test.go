package flowquery

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The largest RTT of the period (rtt_max, else rtt) strictly above.
func TestRTTAbove(t *testing.T) {
	f, peak, none := base(), base(), base()
	peak.RTTMax = 10 * time.Millisecond
	none.RTT = 0
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{RttAbove: durationpb.New(2 * time.Millisecond)}, f, true},
		{&flowv1.FlowFilter{RttAbove: durationpb.New(3 * time.Millisecond)}, f, false},
		{&flowv1.FlowFilter{RttAbove: durationpb.New(5 * time.Millisecond)}, peak, true},
		{&flowv1.FlowFilter{RttAbove: durationpb.New(0)}, none, false},
	})
	checkErrors(t, map[string]*flowv1.FlowFilter{
		`filters[1].rtt_above: -1ms is negative`: {RttAbove: durationpb.New(-time.Millisecond)},
	})
}

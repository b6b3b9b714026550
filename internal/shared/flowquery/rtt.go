package flowquery

import (
	"fmt"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// rttAbove: the flow's largest RTT in the period (rtt_max_ns, else rtt_ns:
// feature rtt) is above the duration; a flow without RTT never is.
func rttAbove(ff *flowv1.FlowFilter) ([]check, error) {
	d := ff.RttAbove
	if d == nil {
		return nil, nil
	}
	if err := d.CheckValid(); err != nil {
		return nil, fmt.Errorf("rtt_above: %w", err)
	}
	above := d.AsDuration()
	if above < 0 {
		return nil, fmt.Errorf("rtt_above: %s is negative", above)
	}
	return one(true, func(f *enriched.Flow) bool { return max(f.RTT, f.RTTMax) > above }), nil
}

package otlp

import "github.com/flowlens/flowlens/pkg/flow"

// The "rtt" feature's attributes, when an RTT was measured.
var (
	kFlowlensRTTNs    = newKey("flowlens.rtt_ns")
	kFlowlensRTTMaxNs = newKey("flowlens.rtt_max_ns")
)

var rttGroup = group{name: "rtt", attributes: rttAttributes}

// rttAttributes appends the group's attributes of r.
func rttAttributes(_ *encoder, b []byte, r *flow.Record) []byte {
	if r.RTT == 0 && r.RTTMax == 0 {
		return b
	}
	b = kvInt(b, fLRAttributes, kFlowlensRTTNs, int64(r.RTT))
	return kvInt(b, fLRAttributes, kFlowlensRTTMaxNs, int64(r.RTTMax))
}

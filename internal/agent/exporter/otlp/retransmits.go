package otlp

import "github.com/flowlens/flowlens/pkg/flow"

// The "retransmits" feature's attribute, when there were retransmits.
var kFlowlensRetransmits = newKey("flowlens.retransmits")

var retransmitsGroup = group{name: "retransmits", attributes: retransmitsAttributes}

// retransmitsAttributes appends the group's attributes of r.
func retransmitsAttributes(_ *encoder, b []byte, r *flow.Record) []byte {
	if r.Retransmits == 0 {
		return b
	}
	return kvInt(b, fLRAttributes, kFlowlensRetransmits, int64(r.Retransmits))
}

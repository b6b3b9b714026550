package otlp

import "github.com/flowlens/flowlens/pkg/flow"

// The "drops" feature's attributes, when the flow had drops.
var (
	kFlowlensDropPackets  = newKey("flowlens.drop_packets")
	kFlowlensDropBytes    = newKey("flowlens.drop_bytes")
	kFlowlensDropCause    = newKey("flowlens.drop_cause")
	kFlowlensDropTCPState = newKey("flowlens.drop_tcp_state")
	kFlowlensDropTCPFlags = newKey("flowlens.drop_tcp_flags")
)

var dropsGroup = group{name: "drops", attributes: dropsAttributes}

// dropsAttributes appends the group's attributes of r.
func dropsAttributes(_ *encoder, b []byte, r *flow.Record) []byte {
	if r.DropPackets == 0 && r.DropBytes == 0 && r.DropCause == "" {
		return b
	}
	const a = fLRAttributes
	b = kvInt(b, a, kFlowlensDropPackets, int64(r.DropPackets))
	b = kvInt(b, a, kFlowlensDropBytes, int64(r.DropBytes))
	b = kvString(b, a, kFlowlensDropCause, r.DropCause)
	b = kvString(b, a, kFlowlensDropTCPState, r.DropTCPState)
	return kvInt(b, a, kFlowlensDropTCPFlags, int64(r.DropTCPFlags))
}

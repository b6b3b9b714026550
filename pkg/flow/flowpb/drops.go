package flowpb

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Flow.drops (feature "drops").
var dropsGroup = group{
	name: "drops",
	num:  50,
	toProto: func(dst, spare *flowv1.Flow, r *flow.Record) {
		m := groupMessage(dst, spare, func(f *flowv1.Flow) **flowv1.Drops { return &f.Drops }, r.HasDrops())
		if m == nil {
			return
		}
		m.DropPackets = r.DropPackets
		m.DropBytes = r.DropBytes
		m.DropCause = r.DropCause
		m.DropTcpState = r.DropTCPState
		m.DropTcpFlags = uint32(r.DropTCPFlags)
	},
	toRecord: func(r *flow.Record, f *flowv1.Flow) {
		if m := f.Drops; m != nil {
			r.DropsFields = flow.DropsFields{DropPackets: m.DropPackets, DropBytes: m.DropBytes, DropCause: m.DropCause,
				DropTCPState: m.DropTcpState, DropTCPFlags: uint16(m.DropTcpFlags)}
		}
	},
	validate: func(f *flowv1.Flow) error {
		return checkMax("drop_tcp_flags", f.GetDrops().GetDropTcpFlags(), 0xffff)
	},
}

// appendDrops appends Flow.drops of r (wire.go).
func appendDrops(b []byte, r *flow.Record) []byte {
	if !r.HasDrops() {
		return b
	}
	b, start := openGroup(b, 50)
	b = appendVarint(b, 1, r.DropPackets)
	b = appendVarint(b, 2, r.DropBytes)
	b = appendString(b, 3, r.DropCause)
	b = appendString(b, 4, r.DropTCPState)
	b = appendVarint(b, 5, uint64(r.DropTCPFlags))
	return closeGroup(b, start)
}

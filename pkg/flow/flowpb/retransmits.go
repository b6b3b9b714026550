package flowpb

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Flow.retransmits (feature "retransmits").
var retransmitsGroup = group{
	name: "retransmits",
	num:  52,
	toProto: func(dst, spare *flowv1.Flow, r *flow.Record) {
		m := groupMessage(dst, spare, func(f *flowv1.Flow) **flowv1.Retransmits { return &f.Retransmits }, r.HasRetransmits())
		if m == nil {
			return
		}
		m.Retransmits = r.Retransmits
	},
	toRecord: func(r *flow.Record, f *flowv1.Flow) {
		if m := f.Retransmits; m != nil {
			r.Retransmits = m.Retransmits
		}
	},
	validate: func(*flowv1.Flow) error { return nil }, // a uint64, like the Record's
}

// appendRetransmits appends Flow.retransmits of r (wire.go).
func appendRetransmits(b []byte, r *flow.Record) []byte {
	if !r.HasRetransmits() {
		return b
	}
	b, start := openGroup(b, 52)
	b = appendVarint(b, 1, r.Retransmits)
	return closeGroup(b, start)
}

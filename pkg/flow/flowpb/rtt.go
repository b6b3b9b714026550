package flowpb

import (
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Flow.rtt (feature "rtt").
var rttGroup = group{
	name: "rtt",
	num:  51,
	toProto: func(dst, spare *flowv1.Flow, r *flow.Record) {
		m := groupMessage(dst, spare, func(f *flowv1.Flow) **flowv1.RTT { return &f.Rtt }, r.HasRTT())
		if m == nil {
			return
		}
		m.RttNs = uint64(r.RTT)
		m.RttMaxNs = uint64(r.RTTMax)
	},
	toRecord: func(r *flow.Record, f *flowv1.Flow) {
		if m := f.Rtt; m != nil {
			r.RTTFields = flow.RTTFields{RTT: time.Duration(m.RttNs), RTTMax: time.Duration(m.RttMaxNs)}
		}
	},
	validate: func(f *flowv1.Flow) error {
		if m := f.Rtt; m != nil && (m.RttNs > 1<<63-1 || m.RttMaxNs > 1<<63-1) {
			return invalid("rtt out of range")
		}
		return nil
	},
}

// appendRTT appends Flow.rtt of r (wire.go).
func appendRTT(b []byte, r *flow.Record) []byte {
	if !r.HasRTT() {
		return b
	}
	b, start := openGroup(b, 51)
	b = appendVarint(b, 1, uint64(r.RTT))
	b = appendVarint(b, 2, uint64(r.RTTMax))
	return closeGroup(b, start)
}

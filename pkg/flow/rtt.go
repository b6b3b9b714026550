package flow

import "time"

// RTTFields are the "rtt" feature's part of a Record: the TCP round-trip
// time the kernel measured for the flow's socket in the period.
type RTTFields struct {
	RTT    time.Duration // the last smoothed RTT seen
	RTTMax time.Duration // the largest in the period
}

var rttGroup = Group{
	Name:       "rtt",
	JSONFields: []string{"rtt_ns", "rtt_max_ns"},
	Sample: func(r *Record) {
		r.RTTFields = RTTFields{RTT: 150 * time.Microsecond, RTTMax: time.Millisecond}
	},
	Has: func(r *Record) bool { return r.HasRTT() },
}

// HasRTT reports whether the record carries an RTT (feature "rtt").
func (g *RTTFields) HasRTT() bool { return g.RTT != 0 || g.RTTMax != 0 }

// appendJSON appends the RTT fields, always (0 when none was measured).
func (g *RTTFields) appendJSON(b []byte) []byte {
	b = appendUint(b, `,"rtt_ns":`, uint64(g.RTT))
	return appendUint(b, `,"rtt_max_ns":`, uint64(g.RTTMax))
}

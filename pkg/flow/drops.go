package flow

// DropsFields are the "drops" feature's part of a Record: the packets of the
// flow the kernel dropped in the period, and why (kfree_skb's reason).
type DropsFields struct {
	DropPackets  uint64
	DropBytes    uint64
	DropCause    string // the kernel's drop reason ("NO_SOCKET"); "" when none was dropped
	DropTCPState string // the TCP state of the socket at the last drop ("ESTABLISHED"), for TCP
	DropTCPFlags uint16 // the TCP flags of the last dropped packet
}

var dropsGroup = Group{
	Name:       "drops",
	JSONFields: []string{"drop_packets", "drop_bytes", "drop_cause", "drop_tcp_state", "drop_tcp_flags"},
	Sample: func(r *Record) {
		r.DropsFields = DropsFields{DropPackets: 2, DropBytes: 100, DropCause: "NO_SOCKET", DropTCPState: "ESTABLISHED", DropTCPFlags: 0x10}
	},
	Has: func(r *Record) bool { return r.HasDrops() },
}

// HasDrops reports whether the record carries any drop field (feature
// "drops"). Field by field, like the other groups' Has: comparing the
// struct with its zero value is a call per flow (its strings).
func (g *DropsFields) HasDrops() bool {
	return g.DropPackets != 0 || g.DropBytes != 0 || g.DropCause != "" || g.DropTCPState != "" || g.DropTCPFlags != 0
}

// appendJSON appends the drop fields, always (zero when nothing dropped).
func (g *DropsFields) appendJSON(b []byte) []byte {
	b = appendUint(b, `,"drop_packets":`, g.DropPackets)
	b = appendUint(b, `,"drop_bytes":`, g.DropBytes)
	b = append(b, `,"drop_cause":`...)
	b = appendQuote(b, g.DropCause)
	b = append(b, `,"drop_tcp_state":`...)
	b = appendQuote(b, g.DropTCPState)
	return appendUint(b, `,"drop_tcp_flags":`, uint64(g.DropTCPFlags))
}

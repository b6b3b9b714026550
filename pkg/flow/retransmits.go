package flow

// RetransmitsFields are the "retransmits" feature's part of a Record: the TCP
// segments the kernel retransmitted on the flow in the period.
type RetransmitsFields struct {
	Retransmits uint64
}

var retransmitsGroup = Group{
	Name:       "retransmits",
	JSONFields: []string{"retransmits"},
	Sample:     func(r *Record) { r.RetransmitsFields = RetransmitsFields{Retransmits: 4} },
	Has:        func(r *Record) bool { return r.HasRetransmits() },
}

// HasRetransmits reports whether the record carries retransmits (feature
// "retransmits").
func (g *RetransmitsFields) HasRetransmits() bool { return g.Retransmits != 0 }

// appendJSON appends retransmits, always (0 when none).
func (g *RetransmitsFields) appendJSON(b []byte) []byte {
	return appendUint(b, `,"retransmits":`, g.Retransmits)
}

package ipfix

// The "rtt" group's elements, in the enrichment block (enriched.go).
const (
	ieFlRTTNanoseconds    = 1004 // unsigned64
	ieFlRTTMaxNanoseconds = 1009 // unsigned64
)

var rttGroup = group{name: "rtt", block: &enrichedBlock,
	elements: []uint16{ieFlRTTNanoseconds, ieFlRTTMaxNanoseconds}}

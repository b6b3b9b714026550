package ipfix

// The "drops" group's elements, in the enrichment block (enriched.go).
const (
	ieFlDropPackets  = 1001 // unsigned64
	ieFlDropBytes    = 1002 // unsigned64
	ieFlDropCause    = 1003 // string, variable length
	ieFlDropTCPState = 1010 // string, variable length
	ieFlDropTCPFlags = 1011 // unsigned16
)

var dropsGroup = group{name: "drops", block: &enrichedBlock,
	elements: []uint16{ieFlDropPackets, ieFlDropBytes, ieFlDropCause, ieFlDropTCPState, ieFlDropTCPFlags}}

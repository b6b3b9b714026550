package ipfix

// The "retransmits" group's element, in the enrichment block (enriched.go).
const ieFlRetransmits = 1005 // unsigned64

var retransmitsGroup = group{name: "retransmits", block: &enrichedBlock, elements: []uint16{ieFlRetransmits}}

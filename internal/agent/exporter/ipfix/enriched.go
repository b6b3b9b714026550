package ipfix

import (
	"encoding/binary"

	"github.com/flowlens/flowlens/pkg/flow"
)

// The enrichment block: the drops, rtt and retransmits groups (their
// elements are in drops.go, rtt.go and retransmits.go) and flowlens's own
// extra fields (sampling, partial, the interfaces count and overflow), one
// block, interleaved as the templates have always sent them.
const (
	variantEnriched        = 4
	ieFlSampling           = 1006 // unsigned32
	ieFlPartial            = 1007 // boolean (1 true, 2 false)
	ieFlInterfaces         = 1008 // unsigned8
	ieFlInterfacesOverflow = 1012 // boolean
)

var enrichedBlock = block{
	bit: variantEnriched,
	has: Enriched,
	fields: func(bool) []field {
		return []field{
			{ieFlDropPackets, 8, true},
			{ieFlDropBytes, 8, true},
			{ieFlDropCause, variableLength, true},
			{ieFlRTTNanoseconds, 8, true},
			{ieFlRetransmits, 8, true},
			{ieFlSampling, 4, true},
			{ieFlPartial, 1, true},
			{ieFlInterfaces, 1, true},
			{ieFlRTTMaxNanoseconds, 8, true},
			{ieFlDropTCPState, variableLength, true},
			{ieFlDropTCPFlags, 2, true},
			{ieFlInterfacesOverflow, 1, true}}
	},
	maxVarLen: MaxDropCause + MaxDropTCPState,
}

// appendEnriched appends the block's data of r, in its fields' order.
func appendEnriched(b []byte, r *flow.Record) []byte {
	b = binary.BigEndian.AppendUint64(b, r.DropPackets)
	b = binary.BigEndian.AppendUint64(b, r.DropBytes)
	b = appendString(b, cut(r.DropCause, MaxDropCause))
	b = appendNanos(b, int64(r.RTT))
	b = binary.BigEndian.AppendUint64(b, r.Retransmits)
	b = binary.BigEndian.AppendUint32(b, r.Sampling)
	b = appendBool(b, r.Partial)
	b = append(b, byte(min(len(r.Interfaces), 255)))
	b = appendNanos(b, int64(r.RTTMax))
	b = appendString(b, cut(r.DropTCPState, MaxDropTCPState))
	b = binary.BigEndian.AppendUint16(b, r.DropTCPFlags)
	return appendBool(b, r.IfacesOverflow || len(r.Interfaces) > MaxInterfaces)
}

// enrichedVarLen is the content of the block's variable-length fields of r.
func enrichedVarLen(r *flow.Record) int {
	return len(cut(r.DropCause, MaxDropCause)) + len(cut(r.DropTCPState, MaxDropTCPState))
}

// Enriched reports whether r goes out with flowlens's enrichment elements
// (1001 to 1012): it has drops, an RTT, retransmits, is partial, was
// sampled (a rate above 1), or crossed more interfaces than recorded. Other
// flows keep the templates without them.
func Enriched(r *flow.Record) bool {
	return r.HasDrops() || r.HasRTT() || r.HasRetransmits() || r.Partial || r.Sampling > 1 || r.IfacesOverflow || len(r.Interfaces) > MaxInterfaces
}

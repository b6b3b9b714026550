package ipfix

import (
	"encoding/binary"

	"github.com/flowlens/flowlens/pkg/flow"
)

// The enrichment block: the drops, rtt and retransmits groups (their
// elements are in drops.go, rtt.go and retransmits.go) and flowlens's own
// extra fields (sampling, partial, the interfaces count and overflow, the
// packets the parser could not read to the end), one block, interleaved as
// the templates have always sent them.
const (
	variantEnriched        = 4
	ieFlSampling           = 1006 // unsigned32
	ieFlPartial            = 1007 // boolean (1 true, 2 false)
	ieFlInterfaces         = 1008 // unsigned8
	ieFlInterfacesOverflow = 1012 // boolean
	// Packets counted whose headers were not read to the end
	// (docs/design/counting.md, Packets the parser cannot read).
	ieFlL4Unread      = 1056 // boolean: a transport header not read (ports 0)
	ieFlExtUnread     = 1057 // boolean: IPv4 options or IPv6 extension headers not read
	ieFlFragUnmatched = 1058 // boolean: fragments counted without their first's ports
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
			{ieFlInterfacesOverflow, 1, true},
			{ieFlL4Unread, 1, true},
			{ieFlExtUnread, 1, true},
			{ieFlFragUnmatched, 1, true}}
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
	b = appendBool(b, r.IfacesOverflow || len(r.Interfaces) > MaxInterfaces)
	b = appendBool(b, r.L4Unread)
	b = appendBool(b, r.ExtUnread)
	return appendBool(b, r.FragUnmatched)
}

// enrichedVarLen is the content of the block's variable-length fields of r.
func enrichedVarLen(r *flow.Record) int {
	return len(cut(r.DropCause, MaxDropCause)) + len(cut(r.DropTCPState, MaxDropTCPState))
}

// Enriched reports whether r goes out with flowlens's enrichment elements
// (1001 to 1012, 1056 to 1058): it has drops, an RTT, retransmits, is
// partial, was sampled (a rate above 1), crossed more interfaces than
// recorded, or counted packets whose headers were not read to the end.
// Other flows keep the templates without them.
func Enriched(r *flow.Record) bool {
	return r.HasDrops() || r.HasRTT() || r.HasRetransmits() || r.Partial || r.Sampling > 1 || r.IfacesOverflow ||
		len(r.Interfaces) > MaxInterfaces || r.L4Unread || r.ExtUnread || r.FragUnmatched
}

package ipfix

import (
	"encoding/binary"

	"github.com/flowlens/flowlens/pkg/flow"
)

// The DNS block (feature "dns"), on flows with a DNS message seen.
const (
	variantDNS               = 8
	ieFlDNSID                = 1020 // unsigned16
	ieFlDNSFlags             = 1021 // unsigned16
	ieFlDNSRcode             = 1022 // unsigned8
	ieFlDNSName              = 1023 // string, variable length
	ieFlDNSNameTruncated     = 1024 // boolean
	ieFlDNSLatencyNanosecs   = 1025 // unsigned64
	ieFlDNSLatencyMaxNanosec = 1026 // unsigned64
	ieFlDNSTimeout           = 1027 // boolean
)

var dnsBlock = block{
	bit: variantDNS,
	has: (*flow.Record).HasDNS,
	fields: func(bool) []field {
		return []field{
			{ieFlDNSID, 2, true},
			{ieFlDNSFlags, 2, true},
			{ieFlDNSRcode, 1, true},
			{ieFlDNSName, variableLength, true},
			{ieFlDNSNameTruncated, 1, true},
			{ieFlDNSLatencyNanosecs, 8, true},
			{ieFlDNSLatencyMaxNanosec, 8, true},
			{ieFlDNSTimeout, 1, true}}
	},
	maxVarLen: MaxDNSName,
}

// dnsVarLen is the content of the block's variable-length fields of r.
func dnsVarLen(r *flow.Record) int { return len(cut(r.DNSName, MaxDNSName)) }

// appendDNS appends the block's data of r, in its fields' order.
func appendDNS(b []byte, r *flow.Record) []byte {
	b = binary.BigEndian.AppendUint16(b, r.DNSID)
	b = binary.BigEndian.AppendUint16(b, r.DNSFlags)
	b = append(b, r.DNSRcode)
	b = appendString(b, cut(r.DNSName, MaxDNSName))
	b = appendBool(b, r.DNSNameTruncated || len(r.DNSName) > MaxDNSName)
	b = appendNanos(b, int64(r.DNSLatency))
	b = appendNanos(b, int64(r.DNSLatencyMax))
	return appendBool(b, r.DNSTimeout)
}

var dnsGroup = group{name: "dns", block: &dnsBlock}

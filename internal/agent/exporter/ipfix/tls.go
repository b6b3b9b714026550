package ipfix

import (
	"encoding/binary"

	"github.com/flowlens/flowlens/pkg/flow"
)

// The TLS block (feature "tls"), on flows with a handshake or QUIC seen.
const (
	variantTLS         = 16
	ieFlTLSVersion     = 1030 // unsigned16
	ieFlTLSCipherSuite = 1031 // unsigned16
	ieFlTLSGroup       = 1032 // unsigned16
	ieFlTLSClientHello = 1033 // boolean
	ieFlQUIC           = 1034 // boolean
)

var tlsBlock = block{
	bit: variantTLS,
	has: (*flow.Record).HasTLS,
	fields: func(bool) []field {
		return []field{
			{ieFlTLSVersion, 2, true},
			{ieFlTLSCipherSuite, 2, true},
			{ieFlTLSGroup, 2, true},
			{ieFlTLSClientHello, 1, true},
			{ieFlQUIC, 1, true}}
	},
}

// appendTLS appends the block's data of r, in its fields' order.
func appendTLS(b []byte, r *flow.Record) []byte {
	b = binary.BigEndian.AppendUint16(b, r.TLSVersion)
	b = binary.BigEndian.AppendUint16(b, r.TLSCipherSuite)
	b = binary.BigEndian.AppendUint16(b, r.TLSGroup)
	b = appendBool(b, r.TLSClientHello)
	return appendBool(b, r.QUIC)
}

var tlsGroup = group{name: "tls", block: &tlsBlock}

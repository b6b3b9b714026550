package ipfix

import (
	"encoding/binary"

	"github.com/flowlens/flowlens/pkg/flow"
)

// The TCP block (feature "tcp"), on TCP flows with any tcp field.
const (
	variantTCP                 = 32
	ieFlTCPRole                = 1040 // unsigned8: 0 unknown, 1 client, 2 server (flow.TCPRole)
	ieFlTCPConnects            = 1041 // unsigned64
	ieFlTCPRefused             = 1042 // unsigned64
	ieFlTCPTimeouts            = 1043 // unsigned64
	ieFlTCPSynRetrans          = 1044 // unsigned64
	ieFlTCPResets              = 1045 // unsigned64
	ieFlTCPZeroWindows         = 1046 // unsigned64
	ieFlTCPHandshakeNanosecs   = 1047 // unsigned64
	ieFlTCPHandshakeMaxNanosec = 1048 // unsigned64
)

var tcpBlock = block{
	bit: variantTCP,
	has: (*flow.Record).HasTCP,
	fields: func(bool) []field {
		return []field{
			{ieFlTCPRole, 1, true},
			{ieFlTCPConnects, 8, true},
			{ieFlTCPRefused, 8, true},
			{ieFlTCPTimeouts, 8, true},
			{ieFlTCPSynRetrans, 8, true},
			{ieFlTCPResets, 8, true},
			{ieFlTCPZeroWindows, 8, true},
			{ieFlTCPHandshakeNanosecs, 8, true},
			{ieFlTCPHandshakeMaxNanosec, 8, true}}
	},
}

// appendTCP appends the block's data of r, in its fields' order.
func appendTCP(b []byte, r *flow.Record) []byte {
	b = append(b, byte(r.TCPRole))
	b = binary.BigEndian.AppendUint64(b, r.TCPConnects)
	b = binary.BigEndian.AppendUint64(b, r.TCPRefused)
	b = binary.BigEndian.AppendUint64(b, r.TCPTimeouts)
	b = binary.BigEndian.AppendUint64(b, r.TCPSynRetrans)
	b = binary.BigEndian.AppendUint64(b, r.TCPResets)
	b = binary.BigEndian.AppendUint64(b, r.TCPZeroWindows)
	b = appendNanos(b, int64(r.TCPHandshake))
	return appendNanos(b, int64(r.TCPHandshakeMax))
}

var tcpGroup = group{name: "tcp", block: &tcpBlock}

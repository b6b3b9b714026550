package ipfix

import (
	"encoding/binary"
	"net/netip"

	"github.com/flowlens/flowlens/pkg/flow"
)

// The tunnel block: the overlay a flow crossed the uplink in (pkg/flow's
// Tunnel, docs/design/counting.md, Overlays), on the flows that have one.
// IANA has no element for a tunnel's outer endpoints, so they are
// flowlens's own: both families' addresses, the one of the outer header
// set and the other zero (the outer family is not the flow's: an IPv6 pod
// flow can cross an IPv4 VXLAN), so that one template serves both.
const (
	variantTunnel     = 64
	ieFlTunnelType    = 1049 // unsigned8: 1 vxlan, 2 geneve, 3 ipip
	ieFlTunnelSrcIPv4 = 1050 // ipv4Address, 0.0.0.0 for an IPv6 outer header
	ieFlTunnelDstIPv4 = 1051 // ipv4Address
	ieFlTunnelSrcIPv6 = 1052 // ipv6Address, :: for an IPv4 outer header
	ieFlTunnelDstIPv6 = 1053 // ipv6Address
	ieFlTunnelVNI     = 1054 // unsigned32: VXLAN/Geneve network identifier, 0 for IP-in-IP
	ieFlOverlayOuter  = 1055 // boolean: the tunnel flow\'s own record (--overlay-outer-flows), skipped by sums
)

var tunnelBlock = block{
	bit: variantTunnel,
	has: Tunneled,
	fields: func(bool) []field {
		return []field{{ieFlTunnelType, 1, true},
			{ieFlTunnelSrcIPv4, 4, true}, {ieFlTunnelDstIPv4, 4, true},
			{ieFlTunnelSrcIPv6, 16, true}, {ieFlTunnelDstIPv6, 16, true},
			{ieFlTunnelVNI, 4, true}, {ieFlOverlayOuter, 1, true}}
	},
}

// Tunneled reports whether r goes out with the tunnel block: some watched
// interface saw its packets inside a tunnel.
func Tunneled(r *flow.Record) bool { return r.Tunnel.TunnelType != flow.TunnelNone }

// appendTunnel appends the block's data of r, in its fields' order: each
// outer address in the fields of its family, zero in the other's.
func appendTunnel(b []byte, r *flow.Record) []byte {
	t := &r.Tunnel
	src, dst := t.TunnelSrcAddr.Unmap(), t.TunnelDstAddr.Unmap()
	b = append(b, byte(t.TunnelType))
	b = append4(b, src)
	b = append4(b, dst)
	b = append16(b, src)
	b = append16(b, dst)
	b = binary.BigEndian.AppendUint32(b, t.TunnelVNI)
	return appendBool(b, t.OverlayOuter)
}

// append4 appends a if it is IPv4, else 0.0.0.0.
func append4(b []byte, a netip.Addr) []byte {
	var x [4]byte
	if a.Is4() {
		x = a.As4()
	}
	return append(b, x[:]...)
}

// append16 appends a if it is IPv6, else ::.
func append16(b []byte, a netip.Addr) []byte {
	var x [16]byte
	if a.Is6() {
		x = a.As16()
	}
	return append(b, x[:]...)
}

package flow

import "net/netip"

// TunnelType is the encapsulation a flow's packets crossed a watched
// interface in (bpf/tunnel.h), with the same numbers as enum tunnel_type.
type TunnelType uint8

// Tunnel types.
const (
	TunnelNone   TunnelType = 0
	TunnelVXLAN  TunnelType = 1 // UDP 4789 or 8472
	TunnelGeneve TunnelType = 2 // UDP 6081
	TunnelIPIP   TunnelType = 3 // IP protocol 4 or 41
)

// String returns "vxlan", "geneve", "ipip" (the JSON names), or "" for none.
func (t TunnelType) String() string {
	switch t {
	case TunnelVXLAN:
		return "vxlan"
	case TunnelGeneve:
		return "geneve"
	case TunnelIPIP:
		return "ipip"
	}
	return ""
}

// Tunnel is the overlay a flow's packets crossed the node's uplink in: the
// TC programs key an encapsulated packet on its inner flow
// (docs/design/counting.md, Overlays), so the inner flow's record lists
// the uplink and carries the tunnel's outer endpoints here. Zero when no
// watched interface saw the flow encapsulated.
type Tunnel struct {
	TunnelType    TunnelType
	TunnelSrcAddr netip.Addr // outer source (plain IPv4 for IPv4)
	TunnelDstAddr netip.Addr
	TunnelVNI     uint32 // VXLAN/Geneve network identifier; 0 for IP-in-IP
	// OverlayOuter marks a record of the tunnel flow itself (agent option
	// --overlay-outer-flows): its key is the outer packets' (node to node,
	// UDP 4789 for VXLAN), its packets and bytes what the uplink carried
	// in the tunnel, the same packets that are counted in their inner
	// flows. Sums over flows skip it (SkipInSums); TunnelSrcAddr and
	// TunnelDstAddr are its own addresses.
	OverlayOuter bool
}

// SkipInSums reports whether r's packets are counted in other records
// too, so that a sum over flows must leave r out: a tunnel flow's record
// (Tunnel.OverlayOuter), whose packets are its inner flows'.
func (r *Record) SkipInSums() bool { return r.Tunnel.OverlayOuter }

// appendJSON appends tunnel_type, tunnel_src_addr, tunnel_dst_addr and
// tunnel_vni for a flow seen in a tunnel only, and "overlay_outer":true
// for a tunnel flow's own record.
func (t *Tunnel) appendJSON(b []byte) []byte {
	if t.TunnelType == TunnelNone {
		return b
	}
	b = append(b, `,"tunnel_type":"`...)
	b = append(b, t.TunnelType.String()...)
	b = append(b, `","tunnel_src_addr":"`...)
	b = appendAddr(b, t.TunnelSrcAddr)
	b = append(b, `","tunnel_dst_addr":"`...)
	b = appendAddr(b, t.TunnelDstAddr)
	b = appendUint(b, `","tunnel_vni":`, uint64(t.TunnelVNI))
	if t.OverlayOuter {
		b = append(b, `,"overlay_outer":true`...)
	}
	return b
}

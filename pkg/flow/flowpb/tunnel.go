package flowpb

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Flow.tunnel (60): the overlay the flow crossed the uplink in
// (pkg/flow's Tunnel). Not a feature group: overlays are part of
// counting, so it is encoded beside the core fields.
const tunnelField = 60

func tunnelToProto(dst, spare *flowv1.Flow, r *flow.Record) {
	t := &r.Tunnel
	m := groupMessage(dst, spare, func(f *flowv1.Flow) **flowv1.Tunnel { return &f.Tunnel }, t.TunnelType != flow.TunnelNone)
	if m == nil {
		return
	}
	m.TunnelType = uint32(t.TunnelType)
	m.TunnelSrcAddr = appendAddr(m.TunnelSrcAddr[:0], t.TunnelSrcAddr)
	m.TunnelDstAddr = appendAddr(m.TunnelDstAddr[:0], t.TunnelDstAddr)
	m.TunnelVni = t.TunnelVNI
	m.OverlayOuter = t.OverlayOuter
}

func tunnelToRecord(r *flow.Record, f *flowv1.Flow) {
	if m := f.Tunnel; m != nil {
		r.Tunnel = flow.Tunnel{TunnelType: flow.TunnelType(m.TunnelType), TunnelSrcAddr: addrFrom(m.TunnelSrcAddr),
			TunnelDstAddr: addrFrom(m.TunnelDstAddr), TunnelVNI: m.TunnelVni, OverlayOuter: m.OverlayOuter}
	}
}

func validateTunnel(f *flowv1.Flow) error {
	m := f.Tunnel
	if m == nil {
		return nil
	}
	return firstErr(
		checkMax("tunnel_type", m.TunnelType, uint32(flow.TunnelIPIP)),
		checkAddr("tunnel_src_addr", m.TunnelSrcAddr), checkAddr("tunnel_dst_addr", m.TunnelDstAddr),
		checkMax("tunnel_vni", m.TunnelVni, 0xffffff),
	)
}

// appendTunnel appends Flow.tunnel of r (wire.go).
func appendTunnel(b []byte, r *flow.Record) []byte {
	t := &r.Tunnel
	if t.TunnelType == flow.TunnelNone {
		return b
	}
	b, start := openGroup(b, tunnelField)
	b = appendVarint(b, 1, uint64(t.TunnelType))
	b = appendAddrField(b, 2, t.TunnelSrcAddr)
	b = appendAddrField(b, 3, t.TunnelDstAddr)
	b = appendVarint(b, 4, uint64(t.TunnelVNI))
	if t.OverlayOuter {
		b = appendVarint(b, 5, 1)
	}
	return closeGroup(b, start)
}

package otlp

import "github.com/flowlens/flowlens/pkg/flow"

// The tunnel a flow crossed the uplink in (pkg/flow's Tunnel), on flows
// seen encapsulated only. Not a feature group: overlays are part of
// counting (docs/design/counting.md, Overlays).
var (
	kFlowlensTunnelType    = newKey("flowlens.tunnel_type")
	kFlowlensTunnelSrcAddr = newKey("flowlens.tunnel_src_addr")
	kFlowlensTunnelDstAddr = newKey("flowlens.tunnel_dst_addr")
	kFlowlensTunnelVNI     = newKey("flowlens.tunnel_vni")
	// A tunnel flow's own record (--overlay-outer-flows): sums skip it.
	kFlowlensOverlayOuter = newKey("flowlens.overlay_outer")
)

// tunnelAttributes appends the tunnel's attributes of r.
func tunnelAttributes(e *encoder, b []byte, r *flow.Record) []byte {
	t := &r.Tunnel
	if t.TunnelType == flow.TunnelNone {
		return b
	}
	const a = fLRAttributes
	b = kvString(b, a, kFlowlensTunnelType, t.TunnelType.String())
	b = e.kvAddr(b, kFlowlensTunnelSrcAddr, t.TunnelSrcAddr)
	b = e.kvAddr(b, kFlowlensTunnelDstAddr, t.TunnelDstAddr)
	b = kvInt(b, a, kFlowlensTunnelVNI, int64(t.TunnelVNI))
	if t.OverlayOuter {
		b = kvBool(b, a, kFlowlensOverlayOuter, true)
	}
	return b
}

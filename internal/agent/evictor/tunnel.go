package evictor

import (
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The tunnel numbers of the record model are the datapath's.
var _ = [1]struct{}{}[int(flow.TunnelVXLAN)-int(datapath.TunnelVXLAN)]
var _ = [1]struct{}{}[int(flow.TunnelGeneve)-int(datapath.TunnelGeneve)]
var _ = [1]struct{}{}[int(flow.TunnelIPIP)-int(datapath.TunnelIPIP)]

// fillTunnel copies the tunnel an encapsulated packet of the flow was read
// out of (bpf/tunnel.h, overlay_on) from its enrichment entry. Not a
// feature's Fill: overlays are part of counting (the uplink is one of the
// inner flow's interfaces), so the tunnel is recorded whenever the
// enrichment maps are read.
func fillTunnel(r *flow.Record, v *datapath.EnrichValue) {
	if v.TunType == 0 {
		return
	}
	r.Tunnel = flow.Tunnel{
		TunnelType:    flow.TunnelType(v.TunType),
		TunnelSrcAddr: addr(v.TunSrc),
		TunnelDstAddr: addr(v.TunDst),
		TunnelVNI:     v.TunVni,
	}
}

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

// readOuter reads what is left of the ended generation's tunnel flows
// (Config.OverlayOuter, bpf/tunnel.h) into out, as records marked
// OverlayOuter: the node-to-node tunnel flows, whose packets are also
// counted in their inner flows (sums skip them). The map is emptied as it
// is read, so a read retried after a failure returns only the rest.
func (e *Evictor) readOuter(out *output) error {
	_, err := e.unread.ReadTunnelOuter(func(keys []datapath.FlowKey, vals []datapath.TunnelOuterValue) error {
		for i := range keys {
			out.addOuter(&keys[i], &vals[i])
		}
		return nil
	})
	return err
}

// addOuter converts one tunnel flow: its outer key and the interface that
// counted it. Its sampling is the global rate without filter rules (the
// packet was sampled before it was read through) and 1 with them (the
// rules apply to the inner packet, after the tunnel flow counted it).
func (o *output) addOuter(k *datapath.FlowKey, v *datapath.TunnelOuterValue) {
	r := o.next()
	r.Sampling = o.e.cfg.Sampling
	if o.e.cfg.Rates != nil {
		r.Sampling = 1
	}
	fillKey(r, k)
	r.Packets, r.Bytes = v.Packets, v.Bytes
	r.StartTime, r.EndTime = o.clk.Wall(v.FirstSeen), o.clk.Wall(v.LastSeen)
	r.EthType = 0x0800
	if !r.SrcAddr.Is4() {
		r.EthType = 0x86dd
	}
	r.Interfaces = o.b.Interfaces(1)
	r.Interfaces[0] = iface(&v.Obs, o.names)
	r.Tunnel = flow.Tunnel{TunnelType: flow.TunnelType(v.Type), TunnelSrcAddr: r.SrcAddr, TunnelDstAddr: r.DstAddr,
		TunnelVNI: v.Vni, OverlayOuter: true}
	o.e.Stats.OuterFlows.Add(1)
	o.done()
}

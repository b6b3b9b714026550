package datapath

import (
	"fmt"

	"github.com/flowlens/flowlens/internal/agent/datapath/batchread"
)

// Overlays (bpf/tunnel.h): the tunnel a flow's packets were read out of,
// in EnrichValue.TunType.
const (
	TunnelVXLAN  = uint8(datapathTunnelTypeTUN_VXLAN)  // UDP 4789 or 8472
	TunnelGeneve = uint8(datapathTunnelTypeTUN_GENEVE) // UDP 6081
	TunnelIPIP   = uint8(datapathTunnelTypeTUN_IPIP)   // IP protocol 4 or 41
)

// TunnelOuterValue is a node-to-node tunnel flow's packets read through
// (tunnel_outer_a/_b, --overlay-outer-flows), by outer key.
type TunnelOuterValue = datapathTunnelOuterValue

// Names of the overlay-outer switch: OverlayOuterConstant is the TC
// programs' load-time constant, OverlayOuterMaps the maps to size to
// MaxFlows when it is on (Config.TCConstants, Config.MapSizes).
const OverlayOuterConstant = "overlay_outer_on"

// OverlayOuterMaps are the tunnel flow maps' names (bpf/tunnel.h).
var OverlayOuterMaps = [2]string{datapathMapTunnelOuterA, datapathMapTunnelOuterB}

// ReadTunnelOuter reads and empties the ended generation's tunnel flow map
// in chunks (no program looks it up once its generation ended, like the
// enrichment map); fn must not keep the slices.
func (e Ended) ReadTunnelOuter(fn func(keys []FlowKey, vals []TunnelOuterValue) error) (int, error) {
	g := e.g
	if g.outer == nil {
		g.outer = batchread.NewReader[FlowKey, TunnelOuterValue](batchread.DefaultChunk, false)
	}
	n, err := g.outer.ReadAndDelete(g.maps.TunnelOuter[e.idx], fn)
	if err != nil {
		return n, fmt.Errorf("read tunnel flow map %d: %w", e.idx, err)
	}
	return n, nil
}

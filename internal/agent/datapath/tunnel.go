package datapath

// Overlays (bpf/tunnel.h): the tunnel a flow's packets were read out of,
// in EnrichValue.TunType, and the flag of a tunnel's node-to-node flow
// recorded under --overlay-outer-flows.
const (
	TunnelVXLAN  = uint8(datapathTunnelTypeTUN_VXLAN)  // UDP 4789 or 8472
	TunnelGeneve = uint8(datapathTunnelTypeTUN_GENEVE) // UDP 6081
	TunnelIPIP   = uint8(datapathTunnelTypeTUN_IPIP)   // IP protocol 4 or 41

	// FlowFlagOverlayOuter marks a flow keyed on a tunnel's outer header,
	// whose packets are counted in their inner flows too: sums skip it.
	FlowFlagOverlayOuter = uint8(datapathFlowFlagsFLOW_F_OVERLAY_OUTER)
)

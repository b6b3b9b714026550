package datapath

// Overlays (bpf/tunnel.h): the tunnel a flow's packets were read out of,
// in EnrichValue.TunType.
const (
	TunnelVXLAN  = uint8(datapathTunnelTypeTUN_VXLAN)  // UDP 4789 or 8472
	TunnelGeneve = uint8(datapathTunnelTypeTUN_GENEVE) // UDP 6081
	TunnelIPIP   = uint8(datapathTunnelTypeTUN_IPIP)   // IP protocol 4 or 41
)

package otlp

import "github.com/flowlens/flowlens/pkg/flow"

// The "xlat" feature's attributes, on translated flows only.
var (
	kFlowlensXlatSrcAddr = newKey("flowlens.xlat_src_addr")
	kFlowlensXlatSrcPort = newKey("flowlens.xlat_src_port")
	kFlowlensXlatDstAddr = newKey("flowlens.xlat_dst_addr")
	kFlowlensXlatDstPort = newKey("flowlens.xlat_dst_port")
	kFlowlensXlatZoneID  = newKey("flowlens.xlat_zone_id")
)

var xlatGroup = group{name: "xlat", attributes: xlatAttributes}

// xlatAttributes appends the group's attributes of r.
func xlatAttributes(e *encoder, b []byte, r *flow.Record) []byte {
	if !r.Translated() {
		return b
	}
	const a = fLRAttributes
	b = e.kvAddr(b, kFlowlensXlatSrcAddr, r.XlatSrcAddr)
	b = kvInt(b, a, kFlowlensXlatSrcPort, int64(r.XlatSrcPort))
	b = e.kvAddr(b, kFlowlensXlatDstAddr, r.XlatDstAddr)
	b = kvInt(b, a, kFlowlensXlatDstPort, int64(r.XlatDstPort))
	return kvInt(b, a, kFlowlensXlatZoneID, int64(r.XlatZoneID))
}

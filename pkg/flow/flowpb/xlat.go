package flowpb

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Flow.xlat (feature "xlat").
var xlatGroup = group{
	name: "xlat",
	num:  53,
	toProto: func(dst, spare *flowv1.Flow, r *flow.Record) {
		m := groupMessage(dst, spare, func(f *flowv1.Flow) **flowv1.Xlat { return &f.Xlat }, r.HasXlat())
		if m == nil {
			return
		}
		m.XlatSrcAddr = appendAddr(m.XlatSrcAddr[:0], r.XlatSrcAddr)
		m.XlatSrcPort = uint32(r.XlatSrcPort)
		m.XlatDstAddr = appendAddr(m.XlatDstAddr[:0], r.XlatDstAddr)
		m.XlatDstPort = uint32(r.XlatDstPort)
		m.XlatZoneId = uint32(r.XlatZoneID)
	},
	toRecord: func(r *flow.Record, f *flowv1.Flow) {
		if m := f.Xlat; m != nil {
			r.XlatFields = flow.XlatFields{XlatSrcAddr: addrFrom(m.XlatSrcAddr), XlatSrcPort: uint16(m.XlatSrcPort),
				XlatDstAddr: addrFrom(m.XlatDstAddr), XlatDstPort: uint16(m.XlatDstPort), XlatZoneID: uint16(m.XlatZoneId)}
		}
	},
	validate: func(f *flowv1.Flow) error {
		m := f.Xlat
		if m == nil {
			return nil
		}
		return firstErr(
			checkAddr("xlat_src_addr", m.XlatSrcAddr), checkAddr("xlat_dst_addr", m.XlatDstAddr),
			checkMax("xlat_src_port", m.XlatSrcPort, 0xffff), checkMax("xlat_dst_port", m.XlatDstPort, 0xffff),
			checkMax("xlat_zone_id", m.XlatZoneId, 0xffff),
		)
	},
}

// appendXlat appends Flow.xlat of r (wire.go).
func appendXlat(b []byte, r *flow.Record) []byte {
	if !r.HasXlat() {
		return b
	}
	b, start := openGroup(b, 53)
	b = appendAddrField(b, 1, r.XlatSrcAddr)
	b = appendVarint(b, 2, uint64(r.XlatSrcPort))
	b = appendAddrField(b, 3, r.XlatDstAddr)
	b = appendVarint(b, 4, uint64(r.XlatDstPort))
	b = appendVarint(b, 5, uint64(r.XlatZoneID))
	return closeGroup(b, start)
}

package flow

import "net/netip"

// XlatFields are the "xlat" (translation) feature's part of a Record: the
// flow's source and destination after conntrack NAT (DNAT of a Service's
// virtual IP to a backend, SNAT or masquerade), when conntrack translated
// it; zero values otherwise.
type XlatFields struct {
	XlatSrcAddr netip.Addr // invalid (zero) when not translated
	XlatSrcPort uint16
	XlatDstAddr netip.Addr
	XlatDstPort uint16
	XlatZoneID  uint16
}

var xlatGroup = Group{
	Name:       "xlat",
	JSONFields: []string{"xlat_src_addr", "xlat_src_port", "xlat_dst_addr", "xlat_dst_port", "xlat_zone_id"},
	Sample: func(r *Record) {
		r.XlatFields = XlatFields{XlatSrcAddr: netip.MustParseAddr("192.0.2.10"), XlatSrcPort: 40000,
			XlatDstAddr: netip.MustParseAddr("10.244.1.7"), XlatDstPort: 8080, XlatZoneID: 3}
	},
	Has: func(r *Record) bool { return r.HasXlat() },
}

// Translated reports whether the record carries a translation (feature
// "xlat"): XlatSrcAddr or XlatDstAddr is set.
func (g *XlatFields) Translated() bool {
	return g.XlatSrcAddr.IsValid() || g.XlatDstAddr.IsValid()
}

// HasXlat reports whether the record carries any field of the "xlat"
// group: a translation (Translated), or a port or zone without its address
// (which the protobuf keeps, the JSON does not write).
func (g *XlatFields) HasXlat() bool {
	return g.Translated() || g.XlatSrcPort != 0 || g.XlatDstPort != 0 || g.XlatZoneID != 0
}

// appendJSON appends the xlat_* fields of a translated flow only (like
// interfaces_overflow: untranslated flows carry no xlat_*).
func (g *XlatFields) appendJSON(b []byte) []byte {
	if !g.Translated() {
		return b
	}
	b = append(b, `,"xlat_src_addr":"`...)
	b = appendAddr(b, g.XlatSrcAddr)
	b = appendUint(b, `","xlat_src_port":`, uint64(g.XlatSrcPort))
	b = append(b, `,"xlat_dst_addr":"`...)
	b = appendAddr(b, g.XlatDstAddr)
	b = appendUint(b, `","xlat_dst_port":`, uint64(g.XlatDstPort))
	return appendUint(b, `,"xlat_zone_id":`, uint64(g.XlatZoneID))
}

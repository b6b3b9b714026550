package ipfix

import (
	"encoding/binary"
	"net/netip"

	"github.com/flowlens/flowlens/pkg/flow"
)

// The NAT block (feature "xlat"): the flow after conntrack's translation,
// in the IANA post-NAT elements, and its zone.
const (
	variantNAT     = 2
	ieFlXlatZoneID = 1013 // unsigned16
)

var natBlock = block{
	bit: variantNAT,
	has: (*flow.Record).Translated,
	fields: func(v6 bool) []field {
		natSrc, natDst, addrLen := uint16(iePostNATSourceIPv4), uint16(iePostNATDestinationIPv4), uint16(4)
		if v6 {
			natSrc, natDst, addrLen = iePostNATSourceIPv6, iePostNATDestinationIPv6, 16
		}
		return []field{{natSrc, addrLen, false}, {natDst, addrLen, false},
			{iePostNAPTSourcePort, 2, false}, {iePostNAPTDestPort, 2, false},
			{ieFlXlatZoneID, 2, true}}
	},
}

// appendNAT appends the block's data of r, in its fields' order.
func appendNAT(b []byte, r *flow.Record, v6 bool) []byte {
	src, sp, dst, dp := PostNAT(r)
	b = appendAddr(b, src, v6)
	b = appendAddr(b, dst, v6)
	b = binary.BigEndian.AppendUint16(b, sp)
	b = binary.BigEndian.AppendUint16(b, dp)
	return binary.BigEndian.AppendUint16(b, r.XlatZoneID)
}

var xlatGroup = group{name: "xlat", block: &natBlock}

// PostNAT returns the source and destination after NAT as the NAT template
// exports them: a side conntrack did not translate (its address not set)
// keeps the flow's own address and port, as does one whose address is not
// of the flow's family; an IPv4-mapped IPv6 address is sent as IPv4.
func PostNAT(r *flow.Record) (src netip.Addr, srcPort uint16, dst netip.Addr, dstPort uint16) {
	src, srcPort, dst, dstPort = r.SrcAddr, r.SrcPort, r.DstAddr, r.DstPort
	if a := r.XlatSrcAddr.Unmap(); a.IsValid() && a.Is4() == r.SrcAddr.Is4() {
		src, srcPort = a, r.XlatSrcPort
	}
	if a := r.XlatDstAddr.Unmap(); a.IsValid() && a.Is4() == r.SrcAddr.Is4() {
		dst, dstPort = a, r.XlatDstPort
	}
	return
}

package ipfix

import (
	"encoding/binary"
	"net/netip"

	"github.com/flowlens/flowlens/pkg/flow"
)

const ethHeaderLen = 14 // destination and source MAC, ethernet type

// OctetDeltaCount is the record's octets as IPFIX defines octetDeltaCount
// (IP header and payload). Record.Bytes counts L2 frames: on a device with
// an Ethernet header (the flow has a MAC address or an ethernet type other
// than that of a bare IP packet) 14 bytes per packet are taken off; flows
// seen by the _l3 programs (no L2 header: both MACs zero) are left as they
// are. A VLAN tag counted in Bytes is not known to the record and stays in
// (4 bytes per tagged packet too many).
func OctetDeltaCount(r *flow.Record) uint64 {
	if r.SrcMAC == ([6]byte{}) && r.DstMAC == ([6]byte{}) {
		return r.Bytes
	}
	l2 := ethHeaderLen * r.Packets
	if l2 > r.Bytes {
		return 0
	}
	return r.Bytes - l2
}

// recordVariant is the variant (so the template) of r's data record.
func recordVariant(r *flow.Record) int {
	v := 0
	if !r.SrcAddr.Is4() {
		v |= variantV6
	}
	// groupgen variant: generated to its end line by make generate. DO NOT EDIT.
	if r.Translated() {
		v |= variantNAT
	}
	if Enriched(r) {
		v |= variantEnriched
	}
	if r.HasDNS() {
		v |= variantDNS
	}
	if r.HasTLS() {
		v |= variantTLS
	}
	if r.HasTCP() {
		v |= variantTCP
	}
	if Tunneled(r) {
		v |= variantTunnel
	}
	// groupgen variant: end.
	return v
}

// cut is s at most n bytes long.
func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// interfaces is the part of r's interfaces the list carries (MaxInterfaces).
func interfaces(r *flow.Record) []flow.Interface {
	if len(r.Interfaces) > MaxInterfaces {
		return r.Interfaces[:MaxInterfaces]
	}
	return r.Interfaces
}

// interfacesListLen is the content of r's interfaces list (after its
// length prefix).
func interfacesListLen(r *flow.Record) int {
	n := listHeaderLen
	for _, it := range interfaces(r) {
		n += interfaceEntryLen + len(cut(it.Name, MaxInterfaceName))
	}
	return n
}

// recordLen is the length of r's data record in variant v.
func recordLen(r *flow.Record, v int) int {
	n := recLen[v] + interfacesListLen(r)
	// groupgen varlen: generated to its end line by make generate. DO NOT EDIT.
	if v&variantEnriched != 0 {
		n += enrichedVarLen(r)
	}
	if v&variantDNS != 0 {
		n += dnsVarLen(r)
	}
	// groupgen varlen: end.
	return n
}

func appendAddr(b []byte, a netip.Addr, v6 bool) []byte {
	if v6 {
		x := a.As16()
		return append(b, x[:]...)
	}
	x := a.As4()
	return append(b, x[:]...)
}

// appendString appends s as a variable-length field (a one-byte length:
// callers keep s under 255 bytes).
func appendString(b []byte, s string) []byte {
	return append(append(b, byte(len(s))), s...)
}

// appendBool appends an IPFIX boolean (RFC 7011 §6.1.5: 1 true, 2 false).
func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 2)
}

// appendInterfaces appends r's interfaces list: a subTemplateList (RFC
// 6313) of TemplateInterface entries, ordered, the first-seen first.
func appendInterfaces(b []byte, r *flow.Record) []byte {
	b = append(b, byte(interfacesListLen(r)), listOrdered)
	b = binary.BigEndian.AppendUint16(b, TemplateInterface)
	for _, it := range interfaces(r) {
		b = appendString(b, cut(it.Name, MaxInterfaceName))
		var in, out uint32
		if it.Direction&flow.DirIngress != 0 {
			in = it.Ifindex
		}
		if it.Direction&flow.DirEgress != 0 {
			out = it.Ifindex
		}
		b = binary.BigEndian.AppendUint32(b, in)
		b = binary.BigEndian.AppendUint32(b, out)
	}
	return b
}

// appendRecord appends r's data record in the template order of variant:
// the core fields, then each block of the variant.
func appendRecord(b []byte, r *flow.Record, variant int) []byte {
	v6 := variant&variantV6 != 0
	b = appendAddr(b, r.SrcAddr, v6)
	b = appendAddr(b, r.DstAddr, v6)
	b = binary.BigEndian.AppendUint16(b, r.SrcPort)
	b = binary.BigEndian.AppendUint16(b, r.DstPort)
	b = append(b, r.Proto)
	b = binary.BigEndian.AppendUint64(b, OctetDeltaCount(r))
	b = binary.BigEndian.AppendUint64(b, r.Packets)
	b = binary.BigEndian.AppendUint64(b, r.Bytes)
	b = binary.BigEndian.AppendUint16(b, r.TCPFlags&0xff) // the header flags; our markers are not TCP bits
	b = binary.BigEndian.AppendUint64(b, uint64(r.StartTime.UnixMilli()))
	b = binary.BigEndian.AppendUint64(b, uint64(r.EndTime.UnixMilli()))
	b = binary.BigEndian.AppendUint16(b, ICMPTypeCode(r))
	b = append(b, r.DSCP<<2)
	b = append(b, r.SrcMAC[:]...)
	b = append(b, r.DstMAC[:]...)
	b = binary.BigEndian.AppendUint16(b, r.EthType)
	b = append(b, FlowDirection(r))
	b = appendInterfaces(b, r)
	// groupgen append: generated to its end line by make generate. DO NOT EDIT.
	if variant&variantNAT != 0 {
		b = appendNAT(b, r, v6)
	}
	if variant&variantEnriched != 0 {
		b = appendEnriched(b, r)
	}
	if variant&variantDNS != 0 {
		b = appendDNS(b, r)
	}
	if variant&variantTLS != 0 {
		b = appendTLS(b, r)
	}
	if variant&variantTCP != 0 {
		b = appendTCP(b, r)
	}
	if variant&variantTunnel != 0 {
		b = appendTunnel(b, r)
	}
	// groupgen append: end.
	return b
}

// ICMPTypeCode is icmpTypeCodeIPv4/IPv6: type << 8 | code for ICMP and
// ICMPv6 flows, 0 otherwise.
func ICMPTypeCode(r *flow.Record) uint16 {
	if r.Proto == 1 || r.Proto == 58 {
		return uint16(r.IcmpType)<<8 | uint16(r.IcmpCode)
	}
	return 0
}

// FlowDirection is flowDirection of the flow's first interface (the one its
// counters come from): 1 egress, 0 ingress (also when unknown).
func FlowDirection(r *flow.Record) uint8 {
	if len(r.Interfaces) > 0 && r.Interfaces[0].Direction == flow.DirEgress {
		return 1
	}
	return 0
}

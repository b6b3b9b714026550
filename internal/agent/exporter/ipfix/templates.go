package ipfix

import (
	"encoding/binary"

	"github.com/flowlens/flowlens/pkg/flow"
)

// Template ids of the data sets: templateID of the record's variant, a sum
// of the variant bits (variantV6, variantNAT, variantEnriched, variantDNS,
// variantTLS, variantTCP, variantTunnel); the named ones below are the
// first eight, 264 to 287 add the DNS and TLS groups, 289 to 320 the TCP
// group (288 is taken), 322 to 386 the tunnel's (321 skipped alike).
// TemplateInterface is the sub-template of the interfaces list's entries.
const (
	TemplateIPv4            uint16 = 256
	TemplateIPv6            uint16 = 257
	TemplateIPv4NAT         uint16 = 258
	TemplateIPv6NAT         uint16 = 259
	TemplateIPv4Enriched    uint16 = 260
	TemplateIPv6Enriched    uint16 = 261
	TemplateIPv4NATEnriched uint16 = 262
	TemplateIPv6NATEnriched uint16 = 263
	TemplateInterface       uint16 = 288
)

// A record's variant picks its template: the bit of the address family
// (variantV6) and one bit per optional block of fields (blocks: variantNAT,
// variantEnriched, variantDNS, variantTLS, in their files), so that a flow
// pays only for the blocks it has. variants, their count, is generated
// with blocks.
const variantV6 = 1

// templateID is the template id of variant v: 256 + v, skipping one id per
// 32 variants so that the ids sent before the TCP group (256 to 287, and
// TemplateInterface, 288) keep their meaning.
func templateID(v int) uint16 { return TemplateIPv4 + uint16(v+v/32) }

// EnterpriseNumber is the default Private Enterprise Number (IANA) of
// flowlens's enterprise-specific Information Elements (Config.EnterpriseNumber
// sets another). 32473 is the PEN IANA reserves for documentation and
// examples (RFC 5612): a placeholder until flowlens registers its own, which
// will then replace it (collectors that map these elements by PEN must
// follow).
const EnterpriseNumber uint32 = 32473

// flowlens's enterprise-specific Information Elements are sent under the
// enterprise number with the enterprise bit 0x8000 set. Their ids start at
// 1001, away from the IANA ids in use, so a collector that ignores the
// enterprise number (a bug, but seen) does not take them for standard
// elements (1001 for octetDeltaCount's 1). Each block's are in its file,
// in ranges: 1001-1012 enrichment (drops.go, rtt.go, retransmits.go,
// enriched.go), 1013 NAT (xlat.go), 1020-1027 DNS (dns.go), 1030-1034 TLS
// (tls.go), 1040-1048 TCP (tcp.go).
const (
	enterpriseBit  = 0x8000
	variableLength = 0xffff
)

// Bounds of the variable-length fields (bytes). They keep a one-byte length
// prefix and the largest record (maxRecordLen) well inside the smallest
// message (minMessage).
const (
	// MaxDropCause bounds the drop cause sent.
	MaxDropCause = 200
	// MaxDropTCPState bounds the drop's TCP state sent.
	MaxDropTCPState = 32
	// MaxDNSName bounds the DNS query name sent; a longer one is cut and
	// sent as truncated.
	MaxDNSName = 254
	// MaxInterfaceName bounds each interface name of the interfaces list
	// (IFNAMSIZ less the NUL: names are never longer).
	MaxInterfaceName = flow.MaxInterfaceName
	// MaxInterfaces bounds the interfaces list (the kernel records six, the
	// rest is marked by interfaces overflow).
	MaxInterfaces = flow.MaxInterfaces
)

// Information Element ids (IANA "IPFIX Information Elements").
const (
	ieOctetDeltaCount        = 1
	iePacketDeltaCount       = 2
	ieProtocolIdentifier     = 4
	ieIPClassOfService       = 5
	ieTCPControlBits         = 6
	ieSourceTransportPort    = 7
	ieSourceIPv4Address      = 8
	ieIngressInterface       = 10
	ieDestinationTransport   = 11
	ieDestinationIPv4Address = 12
	ieEgressInterface        = 14
	ieSourceIPv6Address      = 27
	ieDestinationIPv6Address = 28
	ieICMPTypeCodeIPv4       = 32
	ieSourceMacAddress       = 56
	ieFlowDirection          = 61
	ieDestinationMacAddress  = 80
	ieInterfaceName          = 82
	ieICMPTypeCodeIPv6       = 139
	ieFlowStartMilliseconds  = 152
	ieFlowEndMilliseconds    = 153
	ieEthernetType           = 256
	iePostNATSourceIPv4      = 225
	iePostNATDestinationIPv4 = 226
	iePostNAPTSourcePort     = 227
	iePostNAPTDestPort       = 228
	iePostNATSourceIPv6      = 281
	iePostNATDestinationIPv6 = 282
	ieSubTemplateList        = 292
	ieLayer2OctetDeltaCount  = 352
)

// listOrdered is the subTemplateList semantic "ordered" (RFC 6313 §4.5.4):
// every entry applies, in this order (the first-seen interface first).
const listOrdered = 4

type field struct {
	id, length uint16
	pen        bool // an enterprise-specific element (else IANA)
}

// interfaceFields is the sub-template of one entry of the interfaces list:
// its name, and its ifindex as ingressInterface when the interface saw the
// flow's packets come in, as egressInterface when it saw them go out (both
// for "both"), 0 otherwise.
var interfaceFields = []field{
	{ieInterfaceName, variableLength, false},
	{ieIngressInterface, 4, false},
	{ieEgressInterface, 4, false},
}

// templateFields returns the template of one variant, in record order.
func templateFields(variant int) []field {
	v6 := variant&variantV6 != 0
	src, dst, addrLen, icmp := uint16(ieSourceIPv4Address), uint16(ieDestinationIPv4Address), uint16(4), uint16(ieICMPTypeCodeIPv4)
	if v6 {
		src, dst, addrLen, icmp = ieSourceIPv6Address, ieDestinationIPv6Address, 16, ieICMPTypeCodeIPv6
	}
	fs := []field{
		{src, addrLen, false},
		{dst, addrLen, false},
		{ieSourceTransportPort, 2, false},
		{ieDestinationTransport, 2, false},
		{ieProtocolIdentifier, 1, false},
		{ieOctetDeltaCount, 8, false},
		{iePacketDeltaCount, 8, false},
		{ieLayer2OctetDeltaCount, 8, false},
		{ieTCPControlBits, 2, false},
		{ieFlowStartMilliseconds, 8, false},
		{ieFlowEndMilliseconds, 8, false},
		{icmp, 2, false},
		{ieIPClassOfService, 1, false},
		{ieSourceMacAddress, 6, false},
		{ieDestinationMacAddress, 6, false},
		{ieEthernetType, 2, false},
		{ieFlowDirection, 1, false},
		{ieSubTemplateList, variableLength, false}, // the interfaces list
	}
	for i := range blocks {
		if variant&blocks[i].bit != 0 {
			fs = append(fs, blocks[i].fields(v6)...)
		}
	}
	return fs
}

// fixedLen is the length of a record of fs without the content of its
// variable-length fields; each of those counts its one-byte length prefix
// (every variable field here stays under 255 bytes).
func fixedLen(fs []field) int {
	n := 0
	for _, f := range fs {
		if f.length == variableLength {
			n++
		} else {
			n += int(f.length)
		}
	}
	return n
}

var (
	// recLen is the data record length of each variant without the content
	// of its variable-length fields (recordLen adds it).
	// Summed from each block's length, not from templateFields of every
	// variant: that built 2 x 128 templates (720 allocations, 0.1 MiB) at
	// every agent's start, IPFIX or not (issue #33, item 3).
	recLen = func() (l [variants]int) {
		block := [2][]int{make([]int, len(blocks)), make([]int, len(blocks))} // by v6, by block
		for i := range blocks {
			block[0][i], block[1][i] = fixedLen(blocks[i].fields(false)), fixedLen(blocks[i].fields(true))
		}
		base := [2]int{fixedLen(templateFields(0)), fixedLen(templateFields(variantV6))}
		for v := range l {
			v6 := 0
			if v&variantV6 != 0 {
				v6 = 1
			}
			l[v] = base[v6]
			for i := range blocks {
				if v&blocks[i].bit != 0 {
					l[v] += block[v6][i]
				}
			}
		}
		return l
	}()
	// interfaceEntryLen is an interfaces list entry without its name.
	interfaceEntryLen = fixedLen(interfaceFields)
	// maxRecordLen is the longest data record: every block, every
	// variable-length field at its bound.
	maxRecordLen = func() int {
		n := recLen[variants-1] + listHeaderLen + MaxInterfaces*(interfaceEntryLen+MaxInterfaceName)
		for i := range blocks {
			n += blocks[i].maxVarLen
		}
		return n
	}()
)

// listHeaderLen is a subTemplateList's semantic and template id.
const listHeaderLen = 3

// appendTemplateRecord appends the template record of id with fields fs,
// the enterprise-specific ones under pen.
func appendTemplateRecord(b []byte, id uint16, fs []field, pen uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, id)
	b = binary.BigEndian.AppendUint16(b, uint16(len(fs)))
	for _, f := range fs {
		if f.pen {
			b = binary.BigEndian.AppendUint16(b, f.id|enterpriseBit)
			b = binary.BigEndian.AppendUint16(b, f.length)
			b = binary.BigEndian.AppendUint32(b, pen)
			continue
		}
		b = binary.BigEndian.AppendUint16(b, f.id)
		b = binary.BigEndian.AppendUint16(b, f.length)
	}
	return b
}

// templateRecords are the template records: the interfaces list's
// sub-template first (a collector learns it before the templates that use
// it), then one per variant.
func templateRecords(pen uint32) (out [][]byte) {
	out = append(out, appendTemplateRecord(nil, TemplateInterface, interfaceFields, pen))
	for v := range variants {
		out = append(out, appendTemplateRecord(nil, templateID(v), templateFields(v), pen))
	}
	return out
}

// templateSets packs the template records into template sets, each small
// enough to travel in a message of at most max bytes.
func templateSets(pen uint32, max int) (sets [][]byte) {
	var b []byte
	for _, r := range templateRecords(pen) {
		if b != nil && headerLen+len(b)+len(r) > max {
			binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
			sets, b = append(sets, b), nil
		}
		if b == nil {
			b = binary.BigEndian.AppendUint16(nil, templateSetID)
			b = append(b, 0, 0) // length, when the set is complete
		}
		b = append(b, r...)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return append(sets, b)
}

package flowrules

import (
	"math/bits"
	"net/netip"
	"sort"
)

// Packet is what the kernel knows of a packet when it evaluates the rules.
type Packet struct {
	// Src and Dst are both IPv4 or both IPv6. An IPv4-mapped IPv6 address
	// counts as IPv4, as in the kernel's 16-byte keys.
	Src, Dst         netip.Addr
	Proto            uint8
	SrcPort, DstPort uint16 // TCP, UDP and SCTP
	ICMPType         uint8  // ICMP and ICMPv6
	ICMPCode         uint8
	TCPFlags         uint8 // the low 8 flag bits, FIN 0x01 to CWR 0x80
	// Direction is the hook's, Ingress or Egress; any other value matches
	// only the rules without direction.
	Direction Direction
	Interface string
}

// Match evaluates the table's formula for p and returns the winner's position
// in Rules, or matched false when no rule matches (the packet then gets
// Default). It is the reference the kernel's evaluation is tested against, so
// it computes exactly what the package doc says the kernel computes, with the
// same tables.
func (t *Table) Match(p Packet) (rule int, matched bool) {
	if len(t.Rules) == 0 {
		return -1, false
	}
	m := t.All

	srcCIDR, srcPeer := t.AddrBits(p.Src)
	dstCIDR, dstPeer := t.AddrBits(p.Dst)
	m &= srcCIDR&dstPeer | dstCIDR&srcPeer

	m &= t.Proto[p.Proto]
	if hasPorts(p.Proto) {
		src, _, srcAny := t.PortBits(p.SrcPort)
		_, dst, dstAny := t.PortBits(p.DstPort)
		m &= src & dst & (srcAny | dstAny | t.NoAnyPorts)
	} else {
		m &= t.PortFree
	}
	if isICMP(p.Proto) {
		m &= t.ICMPType[p.ICMPType] & t.ICMPCode[p.ICMPCode]
	} else {
		m &= t.ICMPFree
	}
	if p.Proto == TCP {
		m &= t.TCPFlags[p.TCPFlags]
	} else {
		m &= t.TCPFree
	}
	switch p.Direction {
	case Ingress:
		m &= t.Dir[0]
	case Egress:
		m &= t.Dir[1]
	default:
		m &= t.Dir[0] & t.Dir[1]
	}
	m &= t.IfaceBits(p.Interface)

	if m == 0 {
		return -1, false
	}
	return bits.TrailingZeros64(m), true
}

// Action is the action the table gives p: its winner's, else Default.
func (t *Table) Action(p Packet) Action {
	if i, ok := t.Match(p); ok {
		return t.Rules[i].Action
	}
	return t.Default
}

// AddrBits looks a up as the LPM trie of Addrs would: the bits of the
// longest entry holding it.
func (t *Table) AddrBits(a netip.Addr) (cidr, peer uint64) {
	a16, best := a.As16(), -1
	for _, e := range t.Addrs {
		if e.Len > best && samePrefix(a16, e.Addr, e.Len) {
			best, cidr, peer = e.Len, e.CIDR, e.Peer
		}
	}
	return cidr, peer
}

// PortBits gives port p's entry of the port table.
func (t *Table) PortBits(p uint16) (src, dst, any uint64) {
	i := sort.Search(len(t.Ports), func(i int) bool { return t.Ports[i].Last >= p })
	if i == len(t.Ports) {
		return 0, 0, 0 // no rules
	}
	r := t.Ports[i]
	return r.Src, r.Dst, r.Any
}

// IfaceBits gives the bits of the interface called name: the rules without
// interfaces and those whose interfaces name or match it.
func (t *Table) IfaceBits(name string) uint64 {
	b := t.IfaceFree
	for i, s := range t.ifaces {
		if s.Match(name) {
			b |= 1 << i
		}
	}
	return b
}

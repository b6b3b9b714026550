// Package packet builds network frames byte by byte for tests and
// benchmarks that feed the datapath through BPF_PROG_TEST_RUN.
//
// Each builder returns one header as a fresh []byte; Cat joins them into a
// frame. Length fields are given, not computed, and no checksum is written
// unless asked (the datapath checks none), so a test can build a frame
// exactly as wrong as it needs: slice a header short, pass a length that
// does not match, or change a byte after building it.
//
// An untagged IPv4 UDP frame, 10.9.0.1:sport → 10.9.0.2:5353 with n bytes of
// zero payload and all-zero MAC addresses (internal/agent/exporter/grpc's frame):
//
//	frame := packet.Cat(
//		packet.Eth(packet.EtherTypeIPv4, packet.MACs(packet.MAC{}, packet.MAC{})),
//		packet.IPv4(packet.ProtoUDP, "10.9.0.1", "10.9.0.2", packet.UDPLen+n),
//		packet.UDP(sport, 5353, n))
//
// Without the MACs option the frame goes from SrcMAC to DstMAC. Further
// examples: a QinQ TCP SYN-ACK,
//
//	packet.Cat(packet.Eth(packet.EtherTypeIPv4, packet.QinQ(42, 42)),
//		packet.IPv4(packet.ProtoTCP, "10.0.0.1", "10.0.0.2", packet.TCPLen),
//		packet.TCP(80, 40000, packet.SYN|packet.ACK))
//
// and an IPv6 first fragment behind a Hop-by-Hop header:
//
//	packet.Cat(packet.Eth(packet.EtherTypeIPv6),
//		packet.IPv6(packet.ProtoHopByHop, "fd00::1", "fd00::2", 8+8+packet.TCPLen),
//		packet.Options(packet.ProtoFragment, 0),
//		packet.Fragment6(packet.ProtoTCP, 0, true, 7),
//		packet.TCP(443, 50000, packet.ACK))
package packet

import (
	"encoding/binary"
	"net/netip"
)

// Header lengths.
const (
	EthLen  = 14 // untagged Ethernet header (ETH_HLEN)
	TagLen  = 4  // one 802.1Q/802.1ad tag
	IPv4Len = 20 // IPv4 header without options
	IPv6Len = 40 // fixed IPv6 header
	UDPLen  = 8
	TCPLen  = 20 // TCP header without options (data offset 5)
	ICMPLen = 8  // ICMP or ICMPv6 header with its 4-byte rest-of-header

	// MinTestRunLen is the shortest frame BPF_PROG_TEST_RUN accepts for a
	// TC program: one Ethernet header. Pad pads to it.
	MinTestRunLen = EthLen
	// MinEthLen is the shortest Ethernet frame on a wire, without FCS.
	MinEthLen = 60
)

// EtherTypes and tag protocol identifiers.
const (
	EtherTypeIPv4 uint16 = 0x0800
	EtherTypeARP  uint16 = 0x0806
	EtherTypeIPv6 uint16 = 0x86dd
	TPIDDot1Q     uint16 = 0x8100 // 802.1Q VLAN tag
	TPIDDot1AD    uint16 = 0x88a8 // 802.1ad service tag (QinQ outer)
)

// IP protocol numbers, IPv6 extension headers included.
const (
	ProtoHopByHop uint8 = 0
	ProtoICMP     uint8 = 1
	ProtoTCP      uint8 = 6
	ProtoUDP      uint8 = 17
	ProtoRouting  uint8 = 43
	ProtoFragment uint8 = 44
	ProtoGRE      uint8 = 47
	ProtoICMPv6   uint8 = 58
	ProtoNoNext   uint8 = 59
	ProtoDstOpts  uint8 = 60
	ProtoSCTP     uint8 = 132
)

// TCP flags, as in the header's byte 13.
const (
	FIN uint8 = 1 << iota
	SYN
	RST
	PSH
	ACK
	URG
	ECE
	CWR
)

// IPv4 flags, for Frag.
const (
	MF uint8 = 1 // more fragments
	DF uint8 = 2 // don't fragment
)

// ICMP types the tests use.
const (
	ICMPEchoRequest   uint8 = 8
	ICMPEchoReply     uint8 = 0
	ICMPv6EchoRequest uint8 = 128
	ICMPv6EchoReply   uint8 = 129
)

// MAC is an Ethernet address.
type MAC [6]byte

// The addresses Eth uses unless given MACs: locally administered, easy to
// spot in a dump.
var (
	SrcMAC = MAC{0x02, 0, 0, 0, 0, 0x0a}
	DstMAC = MAC{0x02, 0, 0, 0, 0, 0x0b}
)

// Cat concatenates headers and payloads into one new frame.
func Cat(parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// Payload returns n zero bytes.
func Payload(n int) []byte { return make([]byte, n) }

// Pad appends zero bytes to b up to MinTestRunLen.
func Pad(b []byte) []byte { return PadTo(b, MinTestRunLen) }

// PadTo appends zero bytes to b up to n bytes (e.g. MinEthLen); a longer b
// is returned as it is.
func PadTo(b []byte, n int) []byte {
	for len(b) < n {
		b = append(b, 0)
	}
	return b
}

// ---- Ethernet ----

type eth struct {
	dst, src MAC
	tags     [][2]uint16
}

// EthOption changes the Ethernet header Eth builds.
type EthOption func(*eth)

// MACs sets the destination and source addresses (default DstMAC, SrcMAC).
func MACs(dst, src MAC) EthOption { return func(e *eth) { e.dst, e.src = dst, src } }

// Tag adds a VLAN tag (TPID, then TCI) after the ones before it; the first
// tag is the outermost.
func Tag(tpid, tci uint16) EthOption {
	return func(e *eth) { e.tags = append(e.tags, [2]uint16{tpid, tci}) }
}

// Dot1Q adds an 802.1Q tag (TPID 0x8100) with VLAN id vid, priority 0.
func Dot1Q(vid uint16) EthOption { return Tag(TPIDDot1Q, vid) }

// QinQ adds an 802.1ad service tag (TPID 0x88a8, VLAN outer) and then an
// 802.1Q customer tag (VLAN inner).
func QinQ(outer, inner uint16) EthOption {
	return func(e *eth) { Tag(TPIDDot1AD, outer)(e); Tag(TPIDDot1Q, inner)(e) }
}

// Eth returns an Ethernet header (EthLen + TagLen per tag bytes): DstMAC,
// SrcMAC, the tags, then etherType.
func Eth(etherType uint16, opts ...EthOption) []byte {
	e := eth{dst: DstMAC, src: SrcMAC}
	for _, o := range opts {
		o(&e)
	}
	b := make([]byte, 0, EthLen+TagLen*len(e.tags))
	b = append(append(b, e.dst[:]...), e.src[:]...)
	for _, t := range e.tags {
		b = binary.BigEndian.AppendUint16(b, t[0])
		b = binary.BigEndian.AppendUint16(b, t[1])
	}
	return binary.BigEndian.AppendUint16(b, etherType)
}

// ---- IPv4 and IPv6 ----

type ip struct {
	tos       uint8
	ttl       uint8
	id        uint16
	flags     uint8
	fragOff   uint16
	flowLabel uint32
	checksum  bool
}

// IPOption changes the IPv4 or IPv6 header being built.
type IPOption func(*ip)

// TOS sets the IPv4 TOS byte or the IPv6 Traffic Class (DSCP << 2 | ECN;
// default 0).
func TOS(v uint8) IPOption { return func(h *ip) { h.tos = v } }

// TTL sets the IPv4 TTL or the IPv6 hop limit (default 64).
func TTL(v uint8) IPOption { return func(h *ip) { h.ttl = v } }

// ID sets the IPv4 identification (default 0).
func ID(v uint16) IPOption { return func(h *ip) { h.id = v } }

// Frag sets the IPv4 flags (MF, DF) and fragment offset, in 8-byte units
// (default none and 0). IPv6 fragments are an extension header: Fragment6.
func Frag(flags uint8, offset uint16) IPOption {
	return func(h *ip) { h.flags, h.fragOff = flags, offset }
}

// FlowLabel sets the IPv6 flow label (20 bits; default 0).
func FlowLabel(v uint32) IPOption { return func(h *ip) { h.flowLabel = v } }

// Checksum has IPv4 write its header checksum (by default it is left 0).
func Checksum() IPOption { return func(h *ip) { h.checksum = true } }

func ipOpts(opts []IPOption) ip {
	h := ip{ttl: 64}
	for _, o := range opts {
		o(&h)
	}
	return h
}

// addr parses s; "" is the unspecified address.
func addr(s string) netip.Addr {
	if s == "" {
		return netip.Addr{}
	}
	return netip.MustParseAddr(s)
}

// IPv4 returns a 20-byte IPv4 header (version 4, IHL 5) from src to dst
// carrying proto, its total length IPv4Len+payloadLen. Addresses are parsed
// with netip.MustParseAddr ("" is 0.0.0.0).
func IPv4(proto uint8, src, dst string, payloadLen int, opts ...IPOption) []byte {
	h := ipOpts(opts)
	b := make([]byte, IPv4Len)
	b[0] = 0x45
	b[1] = h.tos
	binary.BigEndian.PutUint16(b[2:], uint16(IPv4Len+payloadLen))
	binary.BigEndian.PutUint16(b[4:], h.id)
	binary.BigEndian.PutUint16(b[6:], uint16(h.flags&7)<<13|h.fragOff&0x1fff)
	b[8] = h.ttl
	b[9] = proto
	if s := addr(src); s.IsValid() {
		a := s.As4()
		copy(b[12:], a[:])
	}
	if d := addr(dst); d.IsValid() {
		a := d.As4()
		copy(b[16:], a[:])
	}
	if h.checksum {
		binary.BigEndian.PutUint16(b[10:], Sum(b))
	}
	return b
}

// Sum is the Internet checksum (RFC 1071) of b: the value to store in a
// checksum field that was zero while summing, and 0 over a header whose
// checksum is right.
func Sum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// IPv6 returns a 40-byte IPv6 header from src to dst, next header next, its
// payload length payloadLen (extension headers included). Options: TOS
// (Traffic Class), FlowLabel, TTL (hop limit).
func IPv6(next uint8, src, dst string, payloadLen int, opts ...IPOption) []byte {
	h := ipOpts(opts)
	b := make([]byte, IPv6Len)
	binary.BigEndian.PutUint32(b[0:], 6<<28|uint32(h.tos)<<20|h.flowLabel&0xfffff)
	binary.BigEndian.PutUint16(b[4:], uint16(payloadLen))
	b[6] = next
	b[7] = h.ttl
	if s := addr(src); s.IsValid() {
		a := s.As16()
		copy(b[8:], a[:])
	}
	if d := addr(dst); d.IsValid() {
		a := d.As16()
		copy(b[24:], a[:])
	}
	return b
}

// ExtHeader returns an IPv6 extension header of 8*(hdrExtLen+1) bytes:
// next, hdrExtLen, then body, then zeros (Pad1 options, for Hop-by-Hop and
// Destination Options). A longer body is kept whole.
func ExtHeader(next, hdrExtLen uint8, body ...byte) []byte {
	b := append([]byte{next, hdrExtLen}, body...)
	return PadTo(b, 8*(int(hdrExtLen)+1))
}

// Options returns a Hop-by-Hop or Destination Options header (the two share
// one layout) of 8*(hdrExtLen+1) bytes: a 4-byte PadN option, then Pad1s.
func Options(next, hdrExtLen uint8) []byte { return ExtHeader(next, hdrExtLen, 1, 4) }

// Fragment6 returns an IPv6 Fragment header: offset in 8-byte units, the M
// flag set when more, identification id.
func Fragment6(next uint8, offset uint16, more bool, id uint32) []byte {
	b := make([]byte, 8)
	b[0] = next
	m := uint16(0)
	if more {
		m = 1
	}
	binary.BigEndian.PutUint16(b[2:], offset<<3|m)
	binary.BigEndian.PutUint32(b[4:], id)
	return b
}

// ---- transport ----

// UDP returns a UDP header followed by payloadLen zero bytes, its length
// field UDPLen+payloadLen, checksum 0 (none).
func UDP(sport, dport uint16, payloadLen int) []byte {
	b := make([]byte, UDPLen+payloadLen)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(UDPLen+payloadLen))
	return b
}

type tcp struct {
	doff     uint8
	seq, ack uint32
	window   uint16
}

// TCPOption changes the TCP header TCP builds.
type TCPOption func(*tcp)

// DataOffset sets the data offset field, in 32-bit words (default 5). The
// header stays TCPLen bytes long whatever the value says.
func DataOffset(words uint8) TCPOption { return func(h *tcp) { h.doff = words } }

// Seq sets the sequence number (default 0).
func Seq(v uint32) TCPOption { return func(h *tcp) { h.seq = v } }

// AckNum sets the acknowledgment number (default 0).
func AckNum(v uint32) TCPOption { return func(h *tcp) { h.ack = v } }

// Window sets the window (default 0).
func Window(v uint16) TCPOption { return func(h *tcp) { h.window = v } }

// TCP returns a 20-byte TCP header with flags (SYN|ACK, ...), checksum 0.
func TCP(sport, dport uint16, flags uint8, opts ...TCPOption) []byte {
	h := tcp{doff: 5}
	for _, o := range opts {
		o(&h)
	}
	b := make([]byte, TCPLen)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], h.seq)
	binary.BigEndian.PutUint32(b[8:], h.ack)
	b[12] = h.doff << 4
	b[13] = flags
	binary.BigEndian.PutUint16(b[14:], h.window)
	return b
}

// ICMP returns an 8-byte ICMP header, checksum 0, whose rest-of-header is
// id and seq (as in an echo request or reply).
func ICMP(typ, code uint8, id, seq uint16) []byte {
	b := make([]byte, ICMPLen)
	b[0], b[1] = typ, code
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	return b
}

// ICMPv6 returns an 8-byte ICMPv6 header: the layout of ICMP's.
func ICMPv6(typ, code uint8, id, seq uint16) []byte { return ICMP(typ, code, id, seq) }

// GRE returns a 4-byte GRE header (no checksum, key or sequence number)
// carrying protocol etherType.
func GRE(etherType uint16) []byte {
	return binary.BigEndian.AppendUint16([]byte{0, 0}, etherType)
}

// Package flow holds the flow record model that every stage after the kernel
// shares, the conversion from the kernel's map values into records, and the
// eviction loop that turns the in-kernel flow maps into batches of records.
package flow

import (
	"net/netip"
	"time"
)

// Direction is the direction in which an interface saw a flow's packets.
type Direction uint8

// Directions, with the same numbers as in bpf/types.h.
const (
	DirIngress Direction = 1
	DirEgress  Direction = 2
	DirBoth    Direction = 3
)

// String returns "ingress", "egress" or "both" (the JSON names).
func (d Direction) String() string {
	switch d {
	case DirIngress:
		return "ingress"
	case DirEgress:
		return "egress"
	case DirBoth:
		return "both"
	}
	return "unknown"
}

// Interface is one (network namespace, interface) pair a flow crossed, and in
// which direction. Name and Netns are resolved by the agent; NetnsID is the
// kernel's network namespace cookie, the identity the datapath uses.
type Interface struct {
	Name      string
	Ifindex   uint32
	Netns     string
	NetnsID   uint64
	Direction Direction
}

// Record is one evicted flow: the 7-tuple key, its counters and metadata for
// one eviction period. Counters (Bytes, Packets) are those seen on the flow's
// first interface only (Interfaces[0]); the other interfaces are listed, not
// counted, so a packet crossing several interfaces of the node counts once.
type Record struct {
	SrcAddr  netip.Addr // plain IPv4 for IPv4 flows
	DstAddr  netip.Addr
	SrcPort  uint16
	DstPort  uint16
	Proto    uint8
	IcmpType uint8
	IcmpCode uint8

	Bytes    uint64 // L2 frame bytes (skb->len)
	Packets  uint64
	TCPFlags uint16 // union of TCP flags, plus the SYN-ACK/FIN-ACK/RST-ACK markers below
	EthType  uint16
	DSCP     uint8
	SrcMAC   [6]byte
	DstMAC   [6]byte

	StartTime time.Time
	EndTime   time.Time

	// Interfaces lists the interfaces the flow crossed, the first-seen one first.
	Interfaces []Interface
	// IfacesOverflow is set when the flow crossed more interfaces than the
	// kernel can record (six); the extra ones are not listed.
	IfacesOverflow bool
	// FragUnmatched is set when IP fragments whose first fragment was not
	// seen were counted in this flow (under port 0: their ports are unknown).
	FragUnmatched bool

	Sampling uint32 // 1 = every packet was looked at
	Partial  bool   // an enrichment entry with no matching flow entry

	// Enrichment (filled by the drop, RTT and retransmit hooks).
	DropPackets  uint64
	DropBytes    uint64
	DropCause    string
	DropTCPState string
	DropTCPFlags uint16
	RTT          time.Duration
	RTTMax       time.Duration
	Retransmits  uint64

	// Translation (feature "xlat"): the flow's source and destination after
	// conntrack NAT (DNAT of a Service's virtual IP to a backend, SNAT or
	// masquerade), when conntrack translated it; zero values otherwise.
	XlatSrcAddr netip.Addr // invalid (zero) when not translated
	XlatSrcPort uint16
	XlatDstAddr netip.Addr
	XlatDstPort uint16
	XlatZoneID  uint16

	// TLS (feature "tls"): the handshake seen on the flow. A ServerHello gives
	// the flow it travels on (server -> client) the negotiated version, cipher
	// suite and key-share group; a ClientHello marks the client's flow; QUIC
	// marks a UDP flow that carried a QUIC long-header packet.
	TLSVersion     uint16 // 0x0301 TLS 1.0 ... 0x0304 TLS 1.3; 0: no ServerHello seen
	TLSCipherSuite uint16 // IANA cipher suite number, e.g. 0x1301
	TLSGroup       uint16 // IANA named group of the server's key share, e.g. 0x001d (x25519); 0: none (TLS 1.2 without key_share)
	TLSClientHello bool   // a ClientHello was seen on this flow
	QUIC           bool

	// DNS (feature "dns"): the last DNS message seen on the flow (a query on
	// the client's flow, with the answer's latency and code; or an answer on the
	// server's flow when its query was not seen).
	DNSID            uint16        // transaction id
	DNSFlags         uint16        // the header's flags word (QR, opcode, AA, TC, RD, RA, rcode)
	DNSRcode         uint8         // response code (the flags' low 4 bits of the answer)
	DNSName          string        // the query name, dotted ("example.com"), at most 64 bytes of wire format
	DNSNameTruncated bool          // the name was longer than what the kernel copies
	DNSLatency       time.Duration // query to answer, last in the period; 0: no answer seen
	DNSLatencyMax    time.Duration
	DNSTimeout       bool // a query went unanswered longer than --dns-timeout
}

// Translated reports whether the record carries a translation (feature
// "xlat"): XlatSrcAddr or XlatDstAddr is set.
func (r *Record) Translated() bool {
	return r.XlatSrcAddr.IsValid() || r.XlatDstAddr.IsValid()
}

// HasTLS reports whether the record carries any TLS field (feature "tls"):
// a ServerHello's version, cipher suite or group, a ClientHello, or QUIC.
func (r *Record) HasTLS() bool {
	return r.TLSVersion != 0 || r.TLSCipherSuite != 0 || r.TLSGroup != 0 || r.TLSClientHello || r.QUIC
}

// HasDNS reports whether the record carries any DNS field (feature "dns"):
// a query or an answer was seen on the flow, or a query timed out.
func (r *Record) HasDNS() bool {
	return r.DNSID != 0 || r.DNSFlags != 0 || r.DNSRcode != 0 || r.DNSName != "" || r.DNSNameTruncated ||
		r.DNSLatency != 0 || r.DNSLatencyMax != 0 || r.DNSTimeout
}

// DNSAnswered reports whether the record's DNS fields describe an answer:
// the last message seen is a response (QR set in DNSFlags: an answer on the
// server's flow), or a query whose answer was seen (DNSLatency > 0). Only
// then does DNSRcode mean something; a query without an answer has rcode 0,
// which is not NOERROR.
func (r *Record) DNSAnswered() bool {
	return r.DNSFlags&DNSFlagQR != 0 || r.DNSLatency > 0
}

// TCP flag markers the datapath adds to the union of TCP flags (bits above the
// eight header flags), so that a consumer can tell a SYN-ACK from SYN+ACK seen
// on different packets.
const (
	TCPFlagSynAck uint16 = 0x100
	TCPFlagFinAck uint16 = 0x200
	TCPFlagRstAck uint16 = 0x400
)

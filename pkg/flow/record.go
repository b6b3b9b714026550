// Package flow holds the flow record model that every stage after the kernel
// shares: Record (record.go) with its JSON form (json.go), the batches that
// carry records from the evictor to the exporters (batch.go), and the cache
// of interfaces' encoded forms the encoders share (ifacecache.go).
//
// A Record is the core fields every flow has plus one group per kernel
// feature, each in a file named after the feature (drops.go, rtt.go,
// retransmits.go, xlat.go, tls.go, dns.go): the group's struct, its JSON
// appender and its Group (the type is in groups.go). Each encoder of records
// follows the same convention, one file per group named after the feature
// and a lookup by feature name: pkg/flow/flowpb (GroupField),
// internal/agent/exporter/otlp (GroupAttributes) and
// internal/agent/exporter/ipfix (GroupElements). A conformance test walks the
// feature registry and, for each feature, encodes Group.Sample with each of
// them. So a new feature adds its group file here and one in each encoder;
// the lists of groups and their calls (Groups in zz_generated.groups.go;
// Record's embedded groups and AppendJSON's calls, in regions marked
// "groupgen"; the encoders' likes) are generated from the feature registry
// by internal/agent/feature/registry/groupgen (make generate).
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
	// L4Unread is set when packets whose transport header (TCP, UDP,
	// SCTP, ICMP) could not be read were counted in this flow: a header cut
	// short (a tiny first fragment, a truncated packet) or a TCP data
	// offset below 5. They are counted under ports 0 (docs/design/
	// counting.md, "Packets the parser cannot read").
	L4Unread bool
	// ExtUnread is set when packets whose IPv4 options or IPv6 extension
	// headers could not be read to their end (truncated, past the parse
	// window, more than six) were counted in this flow, under the last
	// protocol read (IPv6: the next header not read) and ports 0.
	ExtUnread bool

	// Tunnel is the overlay the flow crossed the uplink in (tunnel.go).
	Tunnel Tunnel

	Sampling uint32 // 1 = every packet was looked at
	Partial  bool   // an enrichment entry with no matching flow entry

	// The addresses' names from the DNS answers the agent saw
	// (dnsnames.go); "": none.
	SrcDNSName, DstDNSName string

	// The feature groups: each kernel feature's fields, in a struct of its
	// own file (drops.go, rtt.go ...). They are embedded, so a field reads
	// as before (r.DNSName, r.RTT) and keeps the name of its JSON and
	// protobuf field, while the group is one value a feature fills, copies
	// or compares whole (r.DNSFields). Groups lists them with their JSON.
	// One per feature of the registry, in its order: groupgen writes them.
	// groupgen embeds: generated to its end line by make generate. DO NOT EDIT.
	DropsFields
	RTTFields
	RetransmitsFields
	XlatFields
	TLSFields
	DNSFields
	TCPFields
	// groupgen embeds: end.
}

// TCP flag markers the datapath adds to the union of TCP flags (bits above the
// eight header flags), so that a consumer can tell a SYN-ACK from SYN+ACK seen
// on different packets.
const (
	TCPFlagSynAck uint16 = 0x100
	TCPFlagFinAck uint16 = 0x200
	TCPFlagRstAck uint16 = 0x400
)

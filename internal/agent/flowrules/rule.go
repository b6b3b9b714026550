package flowrules

import (
	"net/netip"
	"strconv"
	"strings"
)

// MaxRules is how many rules a list may hold: one bit each in a uint64.
const MaxRules = 64

// Rule is one validated filter rule. A field left at its zero value (an
// invalid Prefix, a nil pointer, an empty slice, AnyDirection) does not
// constrain the rule. Parse builds Rules from YAML or JSON; a Rule built by
// hand must pass Check (Compile runs it).
type Rule struct {
	// Name is optional; it names the rule in errors and metrics.
	Name   string
	Action Action

	// CIDR and PeerCIDR are masked prefixes of the same family, IPv4 written
	// as IPv4 (never IPv4-mapped IPv6). See the package doc for how they
	// match the two sides of a packet.
	CIDR     netip.Prefix
	PeerCIDR netip.Prefix

	Direction Direction
	// Protocol is the IP protocol number (next header for IPv6).
	Protocol *uint8

	// Ports matches either side's port, SourcePorts and DestinationPorts
	// that side's.
	Ports            []PortRange
	SourcePorts      []PortRange
	DestinationPorts []PortRange

	ICMPType *uint8
	ICMPCode *uint8
	// TCPFlags lists flag sets: a packet matches when it has every flag of
	// at least one of them.
	TCPFlags []TCPFlags

	// Drops keeps only the flows that saw a kernel drop. It is not matched
	// against packets: it is what the rule does when it wins.
	Drops bool
	// Interfaces holds names and /regex/ patterns (package ifname).
	Interfaces []string
	// Sampling is 1 in how many packets the rule accounts; 0 means the
	// agent's --sampling.
	Sampling uint32
}

// Action is what happens to a packet a rule matches.
type Action uint8

// The zero Action is no action: a Rule needs one.
const (
	Accept Action = 1 + iota
	Reject
)

func (a Action) String() string {
	switch a {
	case Accept:
		return "accept"
	case Reject:
		return "reject"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// ParseAction parses "accept" or "reject", in any case.
func ParseAction(s string) (Action, bool) {
	switch strings.ToLower(s) {
	case "accept":
		return Accept, true
	case "reject":
		return Reject, true
	}
	return 0, false
}

// Direction is the direction of the TC hook that sees a packet.
type Direction uint8

// AnyDirection, the zero value, does not constrain a rule.
const (
	AnyDirection Direction = iota
	Ingress
	Egress
)

func (d Direction) String() string {
	switch d {
	case AnyDirection:
		return "any"
	case Ingress:
		return "ingress"
	case Egress:
		return "egress"
	}
	return "Direction(" + strconv.Itoa(int(d)) + ")"
}

// IP protocol numbers the rules know by name.
const (
	ICMP   = 1
	TCP    = 6
	UDP    = 17
	ICMPv6 = 58
	SCTP   = 132
)

var protocolNames = []struct {
	name string
	num  uint8
}{{"tcp", TCP}, {"udp", UDP}, {"icmp", ICMP}, {"icmpv6", ICMPv6}, {"sctp", SCTP}}

// protocolName is the protocol's name, or its number when it has none.
func protocolName(p uint8) string {
	for _, n := range protocolNames {
		if n.num == p {
			return n.name
		}
	}
	return strconv.Itoa(int(p))
}

// hasPorts reports whether packets of protocol p carry the ports rules match.
func hasPorts(p uint8) bool { return p == TCP || p == UDP || p == SCTP }

func isICMP(p uint8) bool { return p == ICMP || p == ICMPv6 }

// PortRange is the ports First to Last, both included.
type PortRange struct{ First, Last uint16 }

func (r PortRange) String() string {
	if r.First == r.Last {
		return strconv.Itoa(int(r.First))
	}
	return strconv.Itoa(int(r.First)) + "-" + strconv.Itoa(int(r.Last))
}

// inPorts reports whether p is in one of the ranges.
func inPorts(rs []PortRange, p uint16) bool {
	for _, r := range rs {
		if r.First <= p && p <= r.Last {
			return true
		}
	}
	return false
}

// TCPFlags is a set of TCP flags, with the bits they have in the TCP header's
// low flag byte.
type TCPFlags uint8

// The TCP flag bits.
const (
	FIN TCPFlags = 0x01
	SYN TCPFlags = 0x02
	RST TCPFlags = 0x04
	PSH TCPFlags = 0x08
	ACK TCPFlags = 0x10
	URG TCPFlags = 0x20
	ECE TCPFlags = 0x40
	CWR TCPFlags = 0x80
)

// flagNames are the tcp_flags entries a rule may list, in the order errors
// list them.
var flagNames = []struct {
	name  string
	flags TCPFlags
}{
	{"FIN", FIN}, {"SYN", SYN}, {"RST", RST}, {"PSH", PSH},
	{"ACK", ACK}, {"URG", URG}, {"ECE", ECE}, {"CWR", CWR},
	{"SYN-ACK", SYN | ACK}, {"FIN-ACK", FIN | ACK}, {"RST-ACK", RST | ACK},
}

// String gives the flags as a tcp_flags entry ("SYN-ACK") when they are one,
// else joined with "+".
func (f TCPFlags) String() string {
	for _, n := range flagNames {
		if n.flags == f {
			return n.name
		}
	}
	var names []string
	for _, n := range flagNames[:8] {
		if f&n.flags != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// matchFlags reports whether a packet with flags pkt has every flag of at
// least one entry.
func matchFlags(entries []TCPFlags, pkt uint8) bool {
	for _, f := range entries {
		if TCPFlags(pkt)&f == f {
			return true
		}
	}
	return false
}

// prefixLen is p's length among 16-byte addresses, where IPv4 is
// IPv4-mapped: /len for IPv6, /96+len for IPv4, 0 for no prefix (a rule
// without the field counts as /0).
func prefixLen(p netip.Prefix) int {
	switch {
	case !p.IsValid():
		return 0
	case p.Addr().Is4():
		return 96 + p.Bits()
	}
	return p.Bits()
}

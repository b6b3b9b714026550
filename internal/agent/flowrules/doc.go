// Package flowrules holds the agent's flow filter rules (issue #14): the rule
// model, parsing from YAML or JSON, validation, precedence, and Compile, which
// turns a list of rules into kernel-independent bitmap tables. It imports
// nothing of the kernel side: the datapath loads a Table into BPF maps, and
// Table.Match is the reference its BPF code is tested against.
// docs/filters.md is the user's guide.
//
// # Rules
//
// A rule file is a YAML (or JSON) list of at most MaxRules objects with the
// keys name, action (accept or reject, required), cidr, peer_cidr, direction
// (ingress or egress), protocol (tcp, udp, icmp, icmpv6, sctp or a number),
// ports, source_ports, destination_ports (443, 80-100, 80,8000-8100 or a YAML
// list), icmp_type, icmp_code, tcp_flags (FIN SYN RST PSH ACK URG ECE CWR
// SYN-ACK FIN-ACK RST-ACK, as a list or a comma string), drops (a boolean),
// interfaces (names and /regex/, the syntax of --interfaces) and sampling.
// Names of actions, directions, protocols and flags are case-insensitive.
// Unknown keys are errors; so is anything Check refuses, with an *Error that
// names the rule and the field.
//
// # What a rule matches
//
// A packet matches a rule when it matches every field the rule gives:
//
//   - cidr C alone: the source or the destination is in C. With peer_cidr P
//     too: one side is in C and the other in P, either way round. peer_cidr
//     alone: either side is in P. A host address is a /32 or /128. A prefix
//     matches only its own family: ::/0 is every IPv6 address, 0.0.0.0/0
//     every IPv4 one.
//   - ports: either side's port; source_ports, destination_ports: that side's.
//     A rule with any of them and no protocol matches only TCP, UDP and SCTP.
//   - icmp_type, icmp_code: the ICMP or ICMPv6 type and code; without
//     protocol, the rule matches ICMP and ICMPv6 only. icmp_code needs
//     icmp_type, since a code means something only within its type.
//   - tcp_flags: a TCP packet with every flag of at least one entry (SYN
//     matches SYN and SYN-ACK; SYN-ACK needs both). Without protocol, the rule
//     matches TCP only.
//   - direction: the direction of the TC hook; interfaces: its interface.
//
// drops and sampling are not matched: they say what the rule does when it
// wins. drops: true keeps only the flows that saw a kernel drop (the drop hook
// records them); sampling N accounts 1 packet in N (absent: the agent's
// --sampling). Both need action accept.
//
// # Precedence
//
// When several rules match, the one with the longest cidr wins, as in a
// routing table: prefixes are compared as 16-byte lengths, IPv4 as
// IPv4-mapped IPv6 (/96+len), and a rule without cidr counts as /0. Then the
// longest peer_cidr wins, then the rule listed first. A subnet's rule thus
// overrides its enclosing network's whatever the order, so lists written per
// namespace compose; to exempt a port inside a CIDR, give the reject rule the
// same cidr and list it first.
//
// # Default action
//
// A packet no rule matches gets the default action: Compile's def (the agent's
// --filter-default, reject unless set, as NetObserv does). With no rules at
// all, every packet is accepted whatever def says.
//
// # The kernel's formula
//
// Bit i of every bitmap of a Table is Table.Rules[i]. For a packet with
// source S, destination D, protocol P, ports sp and dp, the kernel computes:
//
//	S, D = LPM(Addrs, S), LPM(Addrs, D)            // longest entry holding each
//	m  = (S.CIDR & D.Peer) | (D.CIDR & S.Peer)
//	m &= Proto[P]
//	m &= P is TCP, UDP or SCTP ? Src[sp] & Dst[dp] & (Any[sp] | Any[dp] | NoAnyPorts) : PortFree
//	m &= P is ICMP or ICMPv6   ? ICMPType[type] & ICMPCode[code] : ICMPFree
//	m &= P is TCP              ? TCPFlags[flags & 0xff] : TCPFree
//	m &= Dir[0 for ingress, 1 for egress]
//	m &= the hook's IfaceBits
//	winner = lowest set bit of m; none: Default
//
// The address line is exact for every combination: a rule without cidr has
// its CIDR bit everywhere, so it asks for S or D in its peer_cidr; without
// peer_cidr it has its Peer bit everywhere, so it asks for S or D in its
// cidr; with neither it always holds. A field not in Table.Used is All for
// every value and its lookup may be skipped.
package flowrules

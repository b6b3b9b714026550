package flowrules

import (
	"bytes"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/flowlens/flowlens/internal/agent/ifname"
)

// Table is a list of rules compiled into kernel-independent bitmap tables,
// the form the TC programs evaluate: one lookup per packet field, each giving
// a uint64 in which bit i stands for Rules[i]. A field a rule does not
// constrain has the rule's bit set for every value. Match is the formula in
// Go; the package doc gives it as the kernel must compute it.
type Table struct {
	// Rules in precedence order: bit i of every bitmap is Rules[i]. The
	// winner of a packet is the lowest bit set in the AND of its fields.
	Rules []Ranked
	// Default is the action for a packet no rule matches: Accept when there
	// are no rules, else the default given to Compile.
	Default Action
	// All has the bit of every rule; Accept and Drops the bits of the rules
	// whose action is accept and of those with drops: true.
	All, Accept, Drops uint64
	// Used says which fields any rule constrains. A field not in it has
	// every bit of All for every value, so the kernel may skip its lookup.
	Used Fields

	// Addrs are the entries of an LPM trie over 16-byte addresses (IPv4 as
	// IPv4-mapped IPv6). An address's longest matching entry gives its bits:
	// CIDR has the rules without cidr or whose cidr holds the address, Peer
	// likewise for peer_cidr. ::/0 and ::ffff:0:0/96 (all IPv4) are always
	// present, so that an IPv6 prefix such as ::/0 never matches IPv4.
	Addrs []AddrEntry

	// Ports covers the ports 0 to 65535 in runs of equal bits, in order:
	// Src and Dst have the rules without source_ports (destination_ports) or
	// whose list holds the port, Any the rules whose ports hold it.
	// NoAnyPorts has the rules without ports. For TCP, UDP and SCTP:
	//   port_ok = Src[sport] & Dst[dport] & (Any[sport] | Any[dport] | NoAnyPorts)
	// For other protocols port_ok = PortFree, the rules with no port field.
	Ports      []PortRun
	NoAnyPorts uint64
	PortFree   uint64

	// Proto is indexed by the IP protocol. A rule without protocol has its
	// bit for every protocol its other fields allow: TCP, UDP and SCTP with
	// ports, ICMP and ICMPv6 with icmp_type, TCP with tcp_flags.
	Proto [256]uint64
	// ICMPType and ICMPCode are indexed by the packet's ICMP (or ICMPv6)
	// type and code; ICMPFree is for other protocols: the rules without
	// icmp_type and icmp_code.
	ICMPType, ICMPCode [256]uint64
	ICMPFree           uint64
	// TCPFlags is indexed by the packet's low 8 TCP flag bits (FIN 0x01 to
	// CWR 0x80); TCPFree is for other protocols: the rules without tcp_flags.
	TCPFlags [256]uint64
	TCPFree  uint64
	// Dir is indexed by the hook's direction: 0 ingress, 1 egress.
	Dir [2]uint64
	// IfaceFree has the rules without interfaces; IfaceBits gives an
	// interface's bits.
	IfaceFree uint64

	ifaces []ifname.Set // by precedence position; empty for IfaceFree's rules
}

// Ranked is a rule at its place in the precedence order.
type Ranked struct {
	Rule
	Index int // the rule's index in the list as given, from 0
}

// AddrEntry is one prefix of the address LPM trie.
type AddrEntry struct {
	Addr [16]byte // IPv6, or IPv4-mapped IPv6 (::ffff:a.b.c.d)
	Len  int      // 0 to 128; an IPv4 /n is 96+n
	CIDR uint64
	Peer uint64
}

// Prefix is the entry as a netip.Prefix (IPv4 as IPv4), for people.
func (e AddrEntry) Prefix() netip.Prefix {
	a := netip.AddrFrom16(e.Addr)
	if inIPv4(e.Addr, e.Len) {
		return netip.PrefixFrom(a.Unmap(), e.Len-96)
	}
	return netip.PrefixFrom(a, e.Len)
}

// PortRun is the bits of the ports First to Last, both included.
type PortRun struct {
	First, Last   uint16
	Src, Dst, Any uint64
}

// Fields is a set of packet fields, for Table.Used.
type Fields uint8

// The fields a rule can constrain.
const (
	FieldAddr     Fields = 1 << iota // Addrs
	FieldPorts                       // Ports, NoAnyPorts, PortFree
	FieldProto                       // Proto
	FieldICMP                        // ICMPType, ICMPCode, ICMPFree
	FieldTCPFlags                    // TCPFlags, TCPFree
	FieldDir                         // Dir
	FieldIface                       // IfaceBits, IfaceFree
)

func (f Fields) String() string {
	var names []string
	for i, n := range []string{"addr", "ports", "proto", "icmp", "tcp_flags", "dir", "iface"} {
		if f&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// Compile checks rules (see Check) and compiles them. def is the action for
// packets no rule matches; it is not used when there are no rules, since then
// every packet is accepted.
func Compile(rules []Rule, def Action) (*Table, error) {
	if err := Check(rules); err != nil {
		return nil, err
	}
	t := &Table{Default: Accept}
	if len(rules) == 0 {
		return t, nil
	}
	if def != Accept && def != Reject {
		return nil, &Error{Rule: -1, Reason: "the default action must be accept or reject"}
	}
	t.Default = def

	t.Rules = make([]Ranked, len(rules))
	for i, r := range rules {
		t.Rules[i] = Ranked{Rule: r, Index: i}
	}
	// Longest cidr first, then longest peer_cidr, then the list's order.
	sort.SliceStable(t.Rules, func(i, j int) bool {
		a, b := &t.Rules[i], &t.Rules[j]
		if la, lb := prefixLen(a.CIDR), prefixLen(b.CIDR); la != lb {
			return la > lb
		}
		return prefixLen(a.PeerCIDR) > prefixLen(b.PeerCIDR)
	})

	t.ifaces = make([]ifname.Set, len(t.Rules))
	for i := range t.Rules {
		r, bit := &t.Rules[i].Rule, uint64(1)<<i
		t.All |= bit
		if r.Action == Accept {
			t.Accept |= bit
		}
		if r.Drops {
			t.Drops |= bit
		}
		if len(r.Ports) == 0 {
			t.NoAnyPorts |= bit
		}
		if r.portField() == "" {
			t.PortFree |= bit
		}
		for p := range 256 {
			if r.allowsProto(uint8(p)) {
				t.Proto[p] |= bit
			}
			if r.ICMPType == nil || *r.ICMPType == uint8(p) {
				t.ICMPType[p] |= bit
			}
			if r.ICMPCode == nil || *r.ICMPCode == uint8(p) {
				t.ICMPCode[p] |= bit
			}
			if len(r.TCPFlags) == 0 || matchFlags(r.TCPFlags, uint8(p)) {
				t.TCPFlags[p] |= bit
			}
		}
		if r.ICMPType == nil && r.ICMPCode == nil {
			t.ICMPFree |= bit
		}
		if len(r.TCPFlags) == 0 {
			t.TCPFree |= bit
		}
		if r.Direction != Egress {
			t.Dir[0] |= bit
		}
		if r.Direction != Ingress {
			t.Dir[1] |= bit
		}
		if len(r.Interfaces) == 0 {
			t.IfaceFree |= bit
		} else {
			t.ifaces[i], _ = ifname.Compile(r.Interfaces) // Check compiled them
		}
	}
	t.Addrs = t.addrEntries()
	t.Ports = t.portRuns()
	t.Used = t.used()
	return t, nil
}

// allowsProto reports whether the rule can match a packet of protocol p.
func (r *Rule) allowsProto(p uint8) bool {
	switch {
	case r.Protocol != nil:
		return *r.Protocol == p
	case r.portField() != "" && !hasPorts(p):
		return false
	case r.ICMPType != nil && !isICMP(p):
		return false
	case len(r.TCPFlags) > 0 && p != TCP:
		return false
	}
	return true
}

// addrEntries builds the LPM entries: every rule prefix plus ::/0 and
// ::ffff:0:0/96. Each entry's bits are those of the rules whose prefix holds
// all of it, so the longest entry holding an address has the bits of exactly
// the rules whose prefix holds the address: a rule prefix holding the address
// is an entry, so the longest entry is inside it.
func (t *Table) addrEntries() []AddrEntry {
	v4 := netip.AddrFrom16(netip.IPv4Unspecified().As16())
	prefixes := []netip.Prefix{netip.PrefixFrom(netip.IPv6Unspecified(), 0), netip.PrefixFrom(v4, 96)}
	for _, r := range t.Rules {
		for _, p := range []netip.Prefix{r.CIDR, r.PeerCIDR} {
			if p.IsValid() {
				prefixes = append(prefixes, netip.PrefixFrom(netip.AddrFrom16(p.Addr().As16()), prefixLen(p)))
			}
		}
	}
	var entries []AddrEntry
	for _, p := range prefixes {
		e := AddrEntry{Addr: p.Addr().As16(), Len: p.Bits()}
		if slices.ContainsFunc(entries, func(x AddrEntry) bool { return x.Addr == e.Addr && x.Len == e.Len }) {
			continue
		}
		for i, r := range t.Rules {
			if holds(r.CIDR, e) {
				e.CIDR |= 1 << i
			}
			if holds(r.PeerCIDR, e) {
				e.Peer |= 1 << i
			}
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b AddrEntry) int {
		if a.Len != b.Len {
			return a.Len - b.Len
		}
		return bytes.Compare(a.Addr[:], b.Addr[:])
	})
	return entries
}

// holds reports whether a rule's prefix (invalid: none, which holds every
// address) holds every address of entry e. An IPv6 prefix holds no IPv4
// address, even ::/0, whose bits cover ::ffff:0:0/96.
func holds(p netip.Prefix, e AddrEntry) bool {
	if !p.IsValid() {
		return true
	}
	n := prefixLen(p)
	if n > e.Len || (p.Addr().Is6() && inIPv4(e.Addr, e.Len)) {
		return false
	}
	return samePrefix(p.Addr().As16(), e.Addr, n)
}

// inIPv4 reports whether the prefix a/n is inside ::ffff:0:0/96.
func inIPv4(a [16]byte, n int) bool {
	v4 := netip.IPv4Unspecified().As16()
	return n >= 96 && samePrefix(a, v4, 96)
}

// samePrefix reports whether a and b agree on their first n bits.
func samePrefix(a, b [16]byte, n int) bool {
	for i := 0; n > 0; i, n = i+1, n-8 {
		mask := byte(0xff)
		if n < 8 {
			mask <<= 8 - n
		}
		if (a[i]^b[i])&mask != 0 {
			return false
		}
	}
	return true
}

// portRuns cuts 0-65535 where any range starts or ends, and merges
// neighbours with equal bits.
func (t *Table) portRuns() []PortRun {
	cuts := []int{0, 65536}
	for _, r := range t.Rules {
		for _, rs := range [][]PortRange{r.Ports, r.SourcePorts, r.DestinationPorts} {
			for _, pr := range rs {
				cuts = append(cuts, int(pr.First), int(pr.Last)+1)
			}
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var runs []PortRun
	for k := 0; k+1 < len(cuts); k++ {
		run := PortRun{First: uint16(cuts[k]), Last: uint16(cuts[k+1] - 1)}
		for i, r := range t.Rules {
			if len(r.SourcePorts) == 0 || inPorts(r.SourcePorts, run.First) {
				run.Src |= 1 << i
			}
			if len(r.DestinationPorts) == 0 || inPorts(r.DestinationPorts, run.First) {
				run.Dst |= 1 << i
			}
			if inPorts(r.Ports, run.First) {
				run.Any |= 1 << i
			}
		}
		if n := len(runs); n > 0 && runs[n-1].Src == run.Src && runs[n-1].Dst == run.Dst && runs[n-1].Any == run.Any {
			runs[n-1].Last = run.Last
			continue
		}
		runs = append(runs, run)
	}
	return runs
}

// used finds the fields whose tables are not All everywhere.
func (t *Table) used() Fields {
	var f Fields
	all := func(bitmaps ...uint64) bool {
		for _, b := range bitmaps {
			if b != t.All {
				return false
			}
		}
		return true
	}
	for _, e := range t.Addrs {
		if !all(e.CIDR, e.Peer) {
			f |= FieldAddr
		}
	}
	if !all(t.NoAnyPorts, t.PortFree) {
		f |= FieldPorts
	}
	for _, r := range t.Ports {
		if !all(r.Src, r.Dst) {
			f |= FieldPorts
		}
	}
	if !all(t.Proto[:]...) {
		f |= FieldProto
	}
	if !all(t.ICMPFree) || !all(t.ICMPType[:]...) || !all(t.ICMPCode[:]...) {
		f |= FieldICMP
	}
	if !all(t.TCPFree) || !all(t.TCPFlags[:]...) {
		f |= FieldTCPFlags
	}
	if !all(t.Dir[:]...) {
		f |= FieldDir
	}
	if !all(t.IfaceFree) {
		f |= FieldIface
	}
	return f
}

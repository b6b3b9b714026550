package flowrules

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/flowlens/flowlens/internal/agent/ifname"
)

// Error is a problem with one rule, or with the list as a whole. Its text
// names the rule and the field:
//
//	filter rule 3 ("no-health"): destination_ports "100-80": range is upside down
type Error struct {
	Rule   int    // the rule's index in the list, from 0; -1: the list as a whole
	Name   string // the rule's name, "" if it has none
	Field  string // the key at fault, "" for the rule as a whole
	Value  string // the value (or the bad entry of a list), "" when there is none to show
	Reason string
	// Line is the line in the YAML source, 0 when the rules did not come
	// from YAML. Error leaves it out: whoever read the file knows its name.
	Line int
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Rule < 0 {
		b.WriteString("filter rules: ")
	} else {
		fmt.Fprintf(&b, "filter rule %d", e.Rule)
		if e.Name != "" {
			fmt.Fprintf(&b, " (%q)", e.Name)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		if e.Value != "" {
			fmt.Fprintf(&b, " %q", e.Value)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Check validates rules built by hand or by Parse: everything that is not
// syntax. It returns the first problem as an *Error. The checks, rule by
// rule in field order:
//
//   - action is accept or reject; drops and sampling need accept (a reject
//     rule keeps nothing, so they would mean nothing);
//   - cidr and peer_cidr are masked (no host bits), IPv4 written as IPv4, of
//     the same family when both are given; protocol icmp goes with IPv4
//     prefixes and icmpv6 with IPv6 ones;
//   - port ranges are in order; ports need protocol tcp, udp or sctp, or no
//     protocol (the rule then matches only those);
//   - icmp_type and icmp_code need protocol icmp or icmpv6, or none;
//     icmp_code needs icmp_type (a code means something only within its
//     type); neither goes with ports;
//   - tcp_flags entries are not empty and need protocol tcp, or none; they
//     do not go with icmp_type;
//   - direction is known, interface patterns compile;
//   - names are unique, and there are at most MaxRules rules.
func Check(rules []Rule) error {
	if len(rules) > MaxRules {
		return &Error{Rule: -1, Reason: fmt.Sprintf("%d rules: at most %d", len(rules), MaxRules)}
	}
	names := map[string]int{}
	for i := range rules {
		r := &rules[i]
		if err := checkRule(r); err != nil {
			err.Rule, err.Name = i, r.Name
			return err
		}
		if r.Name == "" {
			continue
		}
		if j, ok := names[r.Name]; ok {
			return &Error{Rule: i, Name: r.Name, Field: "name", Value: r.Name,
				Reason: fmt.Sprintf("already the name of rule %d", j)}
		}
		names[r.Name] = i
	}
	return nil
}

// checkRule returns the rule's first problem, with Rule and Name left for the
// caller to fill in.
func checkRule(r *Rule) *Error {
	bad := func(field, value, format string, args ...any) *Error {
		return &Error{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
	}
	if r.Action != Accept && r.Action != Reject {
		return bad("action", "", "is required: accept or reject")
	}
	if r.Action == Reject && r.Drops {
		return bad("drops", "true", "needs action accept: a reject rule keeps nothing")
	}
	if r.Action == Reject && r.Sampling > 0 {
		return bad("sampling", strconv.FormatUint(uint64(r.Sampling), 10), "needs action accept: a reject rule keeps nothing")
	}

	for _, f := range []struct {
		field string
		p     netip.Prefix
	}{{"cidr", r.CIDR}, {"peer_cidr", r.PeerCIDR}} {
		if err := checkPrefix(f.p); err != "" {
			return bad(f.field, f.p.String(), "%s", err)
		}
	}
	if r.CIDR.IsValid() && r.PeerCIDR.IsValid() && r.CIDR.Addr().Is4() != r.PeerCIDR.Addr().Is4() {
		return bad("peer_cidr", r.PeerCIDR.String(), "is %s but cidr %q is %s: a rule's two sides are of one family",
			family(r.PeerCIDR), r.CIDR.String(), family(r.CIDR))
	}
	if r.Protocol != nil && isICMP(*r.Protocol) {
		for _, f := range []struct {
			field string
			p     netip.Prefix
		}{{"cidr", r.CIDR}, {"peer_cidr", r.PeerCIDR}} {
			if !f.p.IsValid() {
				continue
			}
			if want := icmpFor(f.p); want != *r.Protocol {
				return bad("protocol", protocolName(*r.Protocol), "cannot match %s %q, which is %s: use %s",
					f.field, f.p.String(), family(f.p), protocolName(want))
			}
		}
	}

	for _, f := range []struct {
		field string
		rs    []PortRange
	}{{"ports", r.Ports}, {"source_ports", r.SourcePorts}, {"destination_ports", r.DestinationPorts}} {
		for _, pr := range f.rs {
			if pr.First > pr.Last {
				return bad(f.field, pr.String(), "range is upside down")
			}
		}
		if len(f.rs) > 0 && r.Protocol != nil && !hasPorts(*r.Protocol) {
			return bad(f.field, portsString(f.rs), "needs protocol tcp, udp or sctp, not %s", protocolName(*r.Protocol))
		}
	}
	portField := r.portField()

	for _, f := range []struct {
		field string
		v     *uint8
	}{{"icmp_type", r.ICMPType}, {"icmp_code", r.ICMPCode}} {
		if f.v == nil {
			continue
		}
		value := strconv.Itoa(int(*f.v))
		if r.Protocol != nil && !isICMP(*r.Protocol) {
			return bad(f.field, value, "needs protocol icmp or icmpv6, not %s", protocolName(*r.Protocol))
		}
		if portField != "" {
			return bad(f.field, value, "cannot go with %s: ICMP packets have no ports", portField)
		}
	}
	if r.ICMPCode != nil && r.ICMPType == nil {
		return bad("icmp_code", strconv.Itoa(int(*r.ICMPCode)), "needs icmp_type: a code means something only within its type")
	}

	for _, f := range r.TCPFlags {
		if f == 0 {
			return bad("tcp_flags", "", "an entry has no flags")
		}
	}
	if len(r.TCPFlags) > 0 {
		value := flagsString(r.TCPFlags)
		if r.Protocol != nil && *r.Protocol != TCP {
			return bad("tcp_flags", value, "needs protocol tcp, not %s", protocolName(*r.Protocol))
		}
		if r.ICMPType != nil {
			return bad("tcp_flags", value, "cannot go with icmp_type: ICMP packets have no TCP flags")
		}
	}

	if r.Direction > Egress {
		return bad("direction", r.Direction.String(), "must be ingress or egress")
	}
	for _, e := range r.Interfaces {
		if _, err := ifname.CompileEntry(e); err != nil {
			return bad("interfaces", e, "%v", err)
		}
	}
	return nil
}

// checkPrefix returns what is wrong with a rule's prefix, "" if nothing.
func checkPrefix(p netip.Prefix) string {
	switch {
	case !p.IsValid():
		return ""
	case p.Addr().Is4In6():
		// In the kernel's 16-byte keys this would match IPv4 packets.
		return "is IPv4-mapped IPv6: write IPv4 prefixes as IPv4, e.g. 10.0.0.0/8"
	case p != p.Masked():
		return "has host bits set: write " + p.Masked().String()
	}
	return ""
}

func family(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// icmpFor is the ICMP protocol of p's family.
func icmpFor(p netip.Prefix) uint8 {
	if p.Addr().Is4() {
		return ICMP
	}
	return ICMPv6
}

// portField names the rule's first port field, "" if it has none.
func (r *Rule) portField() string {
	switch {
	case len(r.Ports) > 0:
		return "ports"
	case len(r.SourcePorts) > 0:
		return "source_ports"
	case len(r.DestinationPorts) > 0:
		return "destination_ports"
	}
	return ""
}

func portsString(rs []PortRange) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

func flagsString(fs []TCPFlags) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = f.String()
	}
	return strings.Join(s, ",")
}

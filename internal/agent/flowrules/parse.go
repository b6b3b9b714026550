package flowrules

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/flowlens/flowlens/internal/shared/cliconf"
)

// Parse reads a YAML or JSON document (JSON is YAML) holding a list of rules.
// An empty document holds no rules. The rules have passed Check. An error is
// an *Error (with Line set when it points at a line).
func Parse(data []byte) ([]Rule, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &Error{Rule: -1, Reason: err.Error()}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return ParseNode(doc.Content[0])
}

// ParseNode reads a list of rules from a node of a larger YAML document, such
// as the filter_rules key of the agent's configuration file. A null node holds
// no rules. Like Parse, it returns rules that have passed Check, or an *Error.
//
// The node tree is walked rather than decoded into a struct so that unknown
// keys are errors naming the rule, values may be written as YAML likes (443 or
// "443", a list or a comma string), and every error has a line.
func ParseNode(n *yaml.Node) ([]Rule, error) {
	n = resolve(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, &Error{Rule: -1, Reason: "must be a list of rules", Line: n.Line}
	}
	if len(n.Content) > MaxRules {
		return nil, &Error{Rule: -1, Reason: fmt.Sprintf("%d rules: at most %d", len(n.Content), MaxRules), Line: n.Line}
	}
	rules := make([]Rule, len(n.Content))
	lines := make([]map[string]int, len(n.Content))
	for i, item := range n.Content {
		item = resolve(item)
		var err *Error
		lines[i], err = parseRule(&rules[i], item)
		if err != nil {
			err.Rule, err.Name = i, rules[i].Name
			return nil, err
		}
		lines[i][""] = item.Line
	}
	if err := Check(rules); err != nil {
		e := err.(*Error)
		if e.Rule >= 0 {
			if l, ok := lines[e.Rule][e.Field]; ok {
				e.Line = l
			} else {
				e.Line = lines[e.Rule][""]
			}
		}
		return nil, e
	}
	return rules, nil
}

// parseRule fills r from a mapping node and returns the line of each key's
// value, for the errors of Check.
func parseRule(r *Rule, n *yaml.Node) (map[string]int, *Error) {
	if n.Kind != yaml.MappingNode {
		return nil, &Error{Reason: "must be a mapping of keys to values", Line: n.Line}
	}
	// The name first, so that an error in an earlier key can name the rule.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if v := resolve(n.Content[i+1]); n.Content[i].Value == "name" && v.Kind == yaml.ScalarNode && !isNull(v) {
			r.Name = v.Value
		}
	}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		parse, ok := fields[k.Value]
		if !ok {
			return nil, &Error{Reason: fmt.Sprintf("unknown key %q", k.Value), Line: k.Line}
		}
		if _, seen := lines[k.Value]; seen {
			return nil, &Error{Reason: fmt.Sprintf("key %q given twice", k.Value), Line: k.Line}
		}
		lines[k.Value] = v.Line
		if isNull(v) {
			continue // like the agent's config file: no value is absent
		}
		if err := parse(r, v); err != nil {
			err.Field, err.Line = k.Value, v.Line
			return nil, err
		}
	}
	return lines, nil
}

// fields are the keys of a rule. Each parser fills its field from a non-null
// node, or returns an *Error with Value and Reason set.
var fields = map[string]func(r *Rule, v *yaml.Node) *Error{
	"name": scalar(func(r *Rule, s string) string {
		if s == "" {
			return "must not be empty"
		}
		r.Name = s
		return ""
	}),
	"action": scalar(func(r *Rule, s string) string {
		a, ok := ParseAction(s)
		if !ok {
			return "must be accept or reject"
		}
		r.Action = a
		return ""
	}),
	"cidr":      scalar(func(r *Rule, s string) (reason string) { r.CIDR, reason = parsePrefix(s); return }),
	"peer_cidr": scalar(func(r *Rule, s string) (reason string) { r.PeerCIDR, reason = parsePrefix(s); return }),
	"direction": scalar(func(r *Rule, s string) string {
		switch strings.ToLower(s) {
		case "ingress":
			r.Direction = Ingress
		case "egress":
			r.Direction = Egress
		default:
			return "must be ingress or egress"
		}
		return ""
	}),
	"protocol": scalar(func(r *Rule, s string) string {
		for _, p := range protocolNames {
			if strings.EqualFold(s, p.name) {
				r.Protocol = ptr(p.num)
				return ""
			}
		}
		n, err := strconv.ParseUint(s, 10, 8)
		if err != nil {
			return "must be tcp, udp, icmp, icmpv6, sctp or a number from 0 to 255"
		}
		r.Protocol = ptr(uint8(n))
		return ""
	}),
	"ports":             ports(func(r *Rule) *[]PortRange { return &r.Ports }),
	"source_ports":      ports(func(r *Rule) *[]PortRange { return &r.SourcePorts }),
	"destination_ports": ports(func(r *Rule) *[]PortRange { return &r.DestinationPorts }),
	"icmp_type":         scalar(func(r *Rule, s string) (reason string) { r.ICMPType, reason = parseByte(s); return }),
	"icmp_code":         scalar(func(r *Rule, s string) (reason string) { r.ICMPCode, reason = parseByte(s); return }),
	"tcp_flags": list(true, func(r *Rule, item string) string {
		for _, f := range flagNames {
			if strings.EqualFold(item, f.name) {
				r.TCPFlags = append(r.TCPFlags, f.flags)
				return ""
			}
		}
		return "unknown flag: must be FIN, SYN, RST, PSH, ACK, URG, ECE, CWR, SYN-ACK, FIN-ACK or RST-ACK"
	}),
	"drops": scalar(func(r *Rule, s string) string {
		switch strings.ToLower(s) {
		case "true":
			r.Drops = true
		case "false":
			r.Drops = false
		default:
			return "must be true or false"
		}
		return ""
	}),
	// A YAML list's entries are taken whole, as --interfaces takes them:
	// a pattern may hold a comma.
	"interfaces": list(false, func(r *Rule, item string) string {
		r.Interfaces = append(r.Interfaces, item)
		return ""
	}),
	"sampling": scalar(func(r *Rule, s string) string {
		n, err := strconv.ParseUint(s, 10, 32)
		switch {
		case err != nil:
			return "must be an integer from 1 to 4294967295"
		case n == 0:
			return "must be >= 1 (leave it out for the agent's --sampling)"
		}
		r.Sampling = uint32(n)
		return ""
	}),
}

// scalar makes a parser of a single value. set returns the reason the value
// is bad, "" if it is good.
func scalar(set func(r *Rule, s string) string) func(*Rule, *yaml.Node) *Error {
	return func(r *Rule, v *yaml.Node) *Error {
		if v.Kind != yaml.ScalarNode {
			return &Error{Reason: "must be a single value"}
		}
		s := strings.TrimSpace(v.Value)
		if reason := set(r, s); reason != "" {
			return &Error{Value: v.Value, Reason: reason}
		}
		return nil
	}
}

// list makes a parser of a value written as a comma string or a YAML list.
// With split, a YAML list's entries may themselves be comma lists. add
// returns the reason an entry is bad, "" if it is good.
func list(split bool, add func(r *Rule, item string) string) func(*Rule, *yaml.Node) *Error {
	return func(r *Rule, v *yaml.Node) *Error {
		var items []string
		switch v.Kind {
		case yaml.ScalarNode:
			items = cliconf.SplitList(v.Value)
		case yaml.SequenceNode:
			for _, e := range v.Content {
				e = resolve(e)
				if e.Kind != yaml.ScalarNode {
					return &Error{Reason: "list entries must be plain values"}
				}
				if split {
					items = append(items, cliconf.SplitList(e.Value)...)
				} else if s := strings.TrimSpace(e.Value); s != "" {
					items = append(items, s)
				}
			}
		default:
			return &Error{Reason: "must be a value or a list"}
		}
		if len(items) == 0 {
			return &Error{Reason: "is empty: leave the key out to match any"}
		}
		for _, it := range items {
			if reason := add(r, it); reason != "" {
				return &Error{Value: it, Reason: reason}
			}
		}
		return nil
	}
}

// ports makes the parser of a port field: entries 443 or 80-100.
func ports(field func(r *Rule) *[]PortRange) func(*Rule, *yaml.Node) *Error {
	return list(true, func(r *Rule, item string) string {
		first, last, isRange := strings.Cut(item, "-")
		lo, reason := parsePort(first)
		if reason != "" {
			return reason
		}
		hi := lo
		if isRange {
			if hi, reason = parsePort(last); reason != "" {
				return reason
			}
		}
		// Ranges are checked for order by Check, which sees hand-built rules too.
		*field(r) = append(*field(r), PortRange{lo, hi})
		return ""
	})
}

func parsePort(s string) (uint16, string) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseUint(s, 10, 64)
	switch {
	case err != nil && isDigits(s):
		return 0, "must be a port from 0 to 65535"
	case err != nil:
		return 0, "must be a port (443), a range (80-100) or a list (80,443)"
	case n > 65535:
		return 0, "must be a port from 0 to 65535"
	}
	return uint16(n), ""
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

func parseByte(s string) (*uint8, string) {
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return nil, "must be a number from 0 to 255"
	}
	return ptr(uint8(n)), ""
}

// parsePrefix parses a CIDR, or a host address, which is a /32 or /128.
func parsePrefix(s string) (netip.Prefix, string) {
	const syntax = "must be an IPv4 or IPv6 CIDR or address, e.g. 10.0.0.0/8 or fd00::/8"
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, syntax
		}
		return p, ""
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Prefix{}, syntax
	case a.Zone() != "":
		return netip.Prefix{}, "must not have a zone"
	}
	return netip.PrefixFrom(a, a.BitLen()), ""
}

func ptr[T any](v T) *T { return &v }

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// resolve follows YAML aliases (*name) to the node they refer to.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

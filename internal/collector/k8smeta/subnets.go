package k8smeta

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Subnets labels addresses by CIDR; the longest prefix holding an address
// wins. Safe for concurrent use (immutable once parsed).
type Subnets struct {
	entries []subnet // longest prefix first
}

type subnet struct {
	prefix netip.Prefix
	label  string
}

// ParseSubnets parses "name=CIDR,name=CIDR,...": a name may label several
// CIDRs; the same CIDR twice is an error. IPv4 CIDRs match IPv4 and
// IPv4-mapped IPv6 addresses. An empty string gives no subnets.
func ParseSubnets(s string) (*Subnets, error) {
	var specs []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			specs = append(specs, v)
		}
	}
	return NewSubnets(specs...)
}

// NewSubnets builds Subnets from "name=CIDR" strings.
func NewSubnets(specs ...string) (*Subnets, error) {
	out := &Subnets{}
	seen := map[netip.Prefix]string{}
	for _, spec := range specs {
		name, cidr, ok := strings.Cut(spec, "=")
		name, cidr = strings.TrimSpace(name), strings.TrimSpace(cidr)
		if !ok || name == "" || cidr == "" {
			return nil, fmt.Errorf("subnet label %q: want name=CIDR", spec)
		}
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return nil, fmt.Errorf("subnet label %q: %v", spec, err)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		p = p.Masked()
		if prev, dup := seen[p]; dup {
			return nil, fmt.Errorf("subnet label %q: %s is already labelled %q", spec, p, prev)
		}
		seen[p] = name
		out.entries = append(out.entries, subnet{prefix: p, label: name})
	}
	slices.SortStableFunc(out.entries, func(a, b subnet) int { return cmp.Compare(b.prefix.Bits(), a.prefix.Bits()) })
	return out, nil
}

// Label returns the label of the longest prefix holding ip.
func (s *Subnets) Label(ip netip.Addr) (string, bool) {
	if s == nil {
		return "", false
	}
	ip = ip.Unmap()
	for _, e := range s.entries {
		if e.prefix.Contains(ip) {
			return e.label, true
		}
	}
	return "", false
}

// Labels returns the distinct labels, sorted (their number bounds the
// external workload values of the flow metrics).
func (s *Subnets) Labels() []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, e := range s.entries {
		out = append(out, e.label)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// String is the subnets in ParseSubnets form, longest prefix first.
func (s *Subnets) String() string {
	if s == nil {
		return ""
	}
	parts := make([]string, len(s.entries))
	for i, e := range s.entries {
		parts[i] = e.label + "=" + e.prefix.String()
	}
	return strings.Join(parts, ",")
}

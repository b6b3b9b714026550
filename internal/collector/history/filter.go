package history

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/collector/k8smeta"
)

// Filter is a compiled query: a flow matches when every term does.
type Filter []term

// term is one compiled FlowFilter.
type term struct {
	not    bool
	checks []func(*enrich.Flow) bool // all must hold
}

// Match reports whether f matches every term (AND), each term negated by
// its not.
func (fl Filter) Match(f *enrich.Flow) bool {
	for i := range fl {
		if fl[i].match(f) == fl[i].not {
			return false
		}
	}
	return true
}

func (t *term) match(f *enrich.Flow) bool {
	for _, c := range t.checks {
		if !c(f) {
			return false
		}
	}
	return true
}

// Compile checks and compiles filters (see FlowFilter in
// api/flow/v1/history.proto for their meaning). Errors name the field.
func Compile(filters []*flowv1.FlowFilter) (Filter, error) {
	out := make(Filter, 0, len(filters))
	for i, ff := range filters {
		t, err := compileOne(ff)
		if err != nil {
			return nil, fmt.Errorf("filters[%d].%w", i, err)
		}
		out = append(out, t)
	}
	return out, nil
}

func compileOne(ff *flowv1.FlowFilter) (term, error) {
	t := term{not: ff.GetNot()}
	add := func(c func(*enrich.Flow) bool) { t.checks = append(t.checks, c) }
	if v := ff.Namespace; len(v) > 0 {
		add(func(f *enrich.Flow) bool {
			return anyEnd(f, func(m *k8smeta.Meta) bool { return m.Namespace != "" && in(v, m.Namespace) })
		})
	}
	if v := ff.Pod; len(v) > 0 {
		add(func(f *enrich.Flow) bool {
			return anyEnd(f, func(m *k8smeta.Meta) bool { return m.Kind == k8smeta.KindPod && nameIn(v, m.Namespace, m.Name) })
		})
	}
	if v := ff.Workload; len(v) > 0 {
		add(func(f *enrich.Flow) bool {
			return anyEnd(f, func(m *k8smeta.Meta) bool { return m.Workload != "" && nameIn(v, m.Namespace, m.Workload) })
		})
	}
	if v := ff.Node; len(v) > 0 {
		add(func(f *enrich.Flow) bool { return in(v, f.NodeName) })
	}
	for _, p := range []struct {
		field    string
		v        []string
		src, dst bool
	}{{"ip", ff.Ip, true, true}, {"from_ip", ff.FromIp, true, false}, {"to_ip", ff.ToIp, false, true}} {
		if len(p.v) == 0 {
			continue
		}
		prefixes, err := ParsePrefixes(p.v)
		if err != nil {
			return t, fmt.Errorf("%s: %w", p.field, err)
		}
		src, dst := p.src, p.dst
		add(func(f *enrich.Flow) bool {
			return (src && prefixesContain(prefixes, f.SrcAddr)) || (dst && prefixesContain(prefixes, f.DstAddr))
		})
	}
	for _, p := range []struct {
		field    string
		v        []uint32
		src, dst bool
	}{{"port", ff.Port, true, true}, {"from_port", ff.FromPort, true, false}, {"to_port", ff.ToPort, false, true}} {
		if len(p.v) == 0 {
			continue
		}
		for _, port := range p.v {
			if port > 65535 {
				return t, fmt.Errorf("%s: %d is not a port (0 to 65535)", p.field, port)
			}
		}
		v, src, dst := p.v, p.src, p.dst
		add(func(f *enrich.Flow) bool {
			return (src && inU(v, uint32(f.SrcPort))) || (dst && inU(v, uint32(f.DstPort)))
		})
	}
	if v := ff.Protocol; len(v) > 0 {
		add(func(f *enrich.Flow) bool { return inU(v, uint32(f.Proto)) })
	}
	if ff.Drops || len(ff.DropCause) > 0 {
		add(func(f *enrich.Flow) bool { return f.DropPackets > 0 })
	}
	if v := ff.DropCause; len(v) > 0 {
		add(func(f *enrich.Flow) bool {
			for _, c := range v {
				if strings.EqualFold(c, f.DropCause) {
					return true
				}
			}
			return false
		})
	}
	if v := ff.TcpFlags; len(v) > 0 {
		for _, m := range v {
			if m == 0 || m > 0xffff {
				return t, fmt.Errorf("tcp_flags: %#x is not a flag mask (1 to 0xffff)", m)
			}
		}
		add(func(f *enrich.Flow) bool {
			if f.Proto != 6 {
				return false
			}
			for _, m := range v {
				if uint32(f.TCPFlags)&m == m {
					return true
				}
			}
			return false
		})
	}
	if d := ff.RttAbove; d != nil {
		if err := d.CheckValid(); err != nil {
			return t, fmt.Errorf("rtt_above: %w", err)
		}
		above := d.AsDuration()
		if above < 0 {
			return t, fmt.Errorf("rtt_above: %s is negative", above)
		}
		add(func(f *enrich.Flow) bool { return maxRTT(f) > above })
	}
	if v := ff.DnsRcode; len(v) > 0 {
		for _, c := range v {
			if c > 15 {
				return t, fmt.Errorf("dns_rcode: %d is not a response code (0 to 15)", c)
			}
		}
		add(func(f *enrich.Flow) bool { return f.DNSAnswered() && inU(v, uint32(f.DNSRcode)) })
	}
	return t, nil
}

// ParsePrefixes parses CIDRs or plain addresses (a /32 or /128).
func ParsePrefixes(items []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(items))
	for _, s := range items {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr())).Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address or CIDR such as 10.0.0.1 or 10.0.0.0/8", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// unmapBits is how many prefix bits Unmap removes (96 for ::ffff:a.b.c.d).
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

func prefixesContain(ps []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func maxRTT(f *enrich.Flow) time.Duration { return max(f.RTT, f.RTTMax) }

// anyEnd reports whether the Kubernetes context of either end satisfies
// fn; never for a flow without enrichment.
func anyEnd(f *enrich.Flow, fn func(*k8smeta.Meta) bool) bool {
	return f.Enriched && (fn(&f.Src) || fn(&f.Dst))
}

func in(v []string, s string) bool {
	for _, x := range v {
		if x == s {
			return true
		}
	}
	return false
}

// nameIn matches "name" or "namespace/name".
func nameIn(v []string, ns, name string) bool {
	for _, x := range v {
		if n, rest, ok := strings.Cut(x, "/"); ok {
			if n == ns && rest == name {
				return true
			}
		} else if x == name {
			return true
		}
	}
	return false
}

func inU(v []uint32, x uint32) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}

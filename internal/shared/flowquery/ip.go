package flowquery

import (
	"fmt"
	"net/netip"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// ips: ip (either end's address), from_ip (the source's), to_ip (the
// destination's) in one of the prefixes. IPv4-mapped IPv6 addresses, in
// the flow or the prefix, count as IPv4.
func ips(ff *flowv1.FlowFilter) ([]check, error) {
	var out []check
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
			return nil, fmt.Errorf("%s: %w", p.field, err)
		}
		src, dst := p.src, p.dst
		out = append(out, func(f *enriched.Flow) bool {
			return (src && prefixesContain(prefixes, f.SrcAddr)) || (dst && prefixesContain(prefixes, f.DstAddr))
		})
	}
	return out, nil
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

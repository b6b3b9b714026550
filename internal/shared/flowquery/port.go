package flowquery

import (
	"fmt"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// ports: port (either end's), from_port (the source's), to_port (the
// destination's) is one of the values.
func ports(ff *flowv1.FlowFilter) ([]check, error) {
	var out []check
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
				return nil, fmt.Errorf("%s: %d is not a port (0 to 65535)", p.field, port)
			}
		}
		has, src, dst := portSet(p.v), p.src, p.dst
		out = append(out, func(f *enriched.Flow) bool {
			return (src && has(f.SrcPort)) || (dst && has(f.DstPort))
		})
	}
	return out, nil
}

// portSet is membership in v (ports checked): a scan for a few ports, a
// bitmap of every port (8 KiB) for more, so that a long list costs a
// follower or a query one lookup per flow.
func portSet(v []uint32) func(uint16) bool {
	if len(v) <= 16 {
		return func(p uint16) bool { return in(v, uint32(p)) }
	}
	bits := new([65536 / 64]uint64)
	for _, p := range v {
		bits[p/64] |= 1 << (p % 64)
	}
	return func(p uint16) bool { return bits[p/64]&(1<<(p%64)) != 0 }
}

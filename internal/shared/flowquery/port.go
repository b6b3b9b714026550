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
		v, src, dst := p.v, p.src, p.dst
		out = append(out, func(f *enriched.Flow) bool {
			return (src && in(v, uint32(f.SrcPort))) || (dst && in(v, uint32(f.DstPort)))
		})
	}
	return out, nil
}

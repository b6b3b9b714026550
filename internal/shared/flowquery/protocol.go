package flowquery

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// protocol: the IP protocol number is one of the values (observe turns
// names such as tcp into numbers).
func protocol(ff *flowv1.FlowFilter) ([]check, error) {
	v := ff.Protocol
	return one(len(v) > 0, func(f *enriched.Flow) bool { return in(v, uint32(f.Proto)) }), nil
}

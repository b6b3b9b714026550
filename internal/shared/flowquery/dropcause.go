package flowquery

import (
	"strings"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// dropCause: the flow had dropped packets (it implies drops) and its
// drop_cause is one of the values, in any case (netfilter_drop is
// NETFILTER_DROP).
func dropCause(ff *flowv1.FlowFilter) ([]check, error) {
	v := ff.DropCause
	return one(len(v) > 0, func(f *enriched.Flow) bool {
		if !dropped(f) {
			return false
		}
		for _, c := range v {
			if strings.EqualFold(c, f.DropCause) {
				return true
			}
		}
		return false
	}), nil
}

package flowquery

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// node: the node whose agent observed the flow (node_name), not the node
// of either end (that is workload's, for node addresses).
func node(ff *flowv1.FlowFilter) ([]check, error) {
	v := ff.Node
	return one(len(v) > 0, func(f *enriched.Flow) bool { return in(v, f.NodeName) }), nil
}

package flowquery

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// namespace: the namespace of either end's pod or Service (an enriched
// flow's Kubernetes context; a node or an external address has none).
func namespace(ff *flowv1.FlowFilter) ([]check, error) {
	v := ff.Namespace
	return one(len(v) > 0, func(f *enriched.Flow) bool {
		return anyEnd(f, func(m *enriched.K8sContext) bool { return m.Namespace != "" && in(v, m.Namespace) })
	}), nil
}

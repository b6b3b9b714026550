package flowquery

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// pod: either end is a pod named "name" or "namespace/name".
func pod(ff *flowv1.FlowFilter) ([]check, error) {
	v := ff.Pod
	return one(len(v) > 0, func(f *enriched.Flow) bool {
		return anyEnd(f, func(m *enriched.K8sContext) bool { return m.Kind == enriched.KindPod && nameIn(v, m.Namespace, m.Name) })
	}), nil
}

package flowquery

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// workload: either end belongs to the workload (Deployment, StatefulSet,
// DaemonSet, Service, node...) named "name" or "namespace/name".
func workload(ff *flowv1.FlowFilter) ([]check, error) {
	v := ff.Workload
	return one(len(v) > 0, func(f *enriched.Flow) bool {
		return anyEnd(f, func(m *enriched.K8sContext) bool { return m.Workload != "" && nameIn(v, m.Namespace, m.Workload) })
	}), nil
}

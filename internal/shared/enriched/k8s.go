package enriched

import "github.com/flowlens/flowlens/pkg/flow"

// Kind is what an address belongs to.
type Kind string

// Kinds.
const (
	KindPod      Kind = "pod"
	KindService  Kind = "service"
	KindNode     Kind = "node"
	KindExternal Kind = "external"
)

// Workload kinds other than the owner kinds found in owner references
// (Deployment, StatefulSet, DaemonSet, Job, ReplicaSet...).
const (
	WorkloadPod     = "Pod"     // a pod without a controller is its own workload
	WorkloadService = "Service" // a Service ClusterIP
	WorkloadNode    = "Node"    // a node address, or a host-network pod's
)

// K8sContext is the Kubernetes context of one address (the history's
// K8SContext message, the JSON's src_k8s and dst_k8s). Empty fields are left out
// of its JSON.
//
//   - pod: Namespace, Name (the pod), Workload and WorkloadKind (its
//     controller: Deployment via its ReplicaSet, StatefulSet, DaemonSet,
//     Job, or any other controller kind; a pod without one is its own
//     workload, kind Pod), Node (where it runs).
//   - service: Namespace, Name, Workload = Name, WorkloadKind Service.
//   - node (a node address or a host-network pod's): Name = Node = Workload
//     = the node's name, WorkloadKind Node.
//   - external (not in the cluster): Subnet, the label of the longest
//     configured prefix holding the address, "" when none does.
type K8sContext struct {
	Kind         Kind   `json:"kind,omitempty"`
	Namespace    string `json:"namespace,omitempty"`
	Name         string `json:"name,omitempty"`
	Workload     string `json:"workload,omitempty"`
	WorkloadKind string `json:"workload_kind,omitempty"`
	Node         string `json:"node,omitempty"`
	Subnet       string `json:"subnet,omitempty"`
}

// AppendJSON appends m as a JSON object with the field names kind,
// namespace, name, workload, workload_kind, node, subnet, leaving out empty
// ones (the same bytes encoding/json gives). It allocates nothing when b
// has room.
func (m *K8sContext) AppendJSON(b []byte) []byte {
	b = append(b, '{')
	first := true
	field := func(name, v string) {
		if v == "" {
			return
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":`...)
		b = flow.AppendJSONString(b, v)
	}
	field("kind", string(m.Kind))
	field("namespace", m.Namespace)
	field("name", m.Name)
	field("workload", m.Workload)
	field("workload_kind", m.WorkloadKind)
	field("node", m.Node)
	field("subnet", m.Subnet)
	return append(b, '}')
}

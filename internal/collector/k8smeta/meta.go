// Package k8smeta resolves IP addresses to Kubernetes context: the pod,
// Service or node that holds an address, the pod's owner workload
// (Deployment through its ReplicaSet, StatefulSet, DaemonSet, Job...), its
// node, and for addresses outside the cluster an optional subnet label.
//
// Cache keeps what it needs of Pods, ReplicaSets, Services and Nodes in
// shared informers whose transform function strips every other field
// before an object is stored, indexed by IP. Subnets labels external
// addresses by configured CIDRs (longest prefix wins). Resolver puts the
// two together: the flow collector calls Resolve for each flow's source
// and destination.
//
//	c, _ := k8smeta.NewCache(clientset)
//	c.Start()
//	defer c.Stop()
//	c.WaitForSync(ctx)
//	subnets, _ := k8smeta.ParseSubnets("corp=10.0.0.0/8,internet=0.0.0.0/0")
//	r := &k8smeta.Resolver{Source: c, Subnets: subnets}
//	m, inCluster := r.Resolve(netip.MustParseAddr("10.244.1.7"))
package k8smeta

import (
	"net/netip"
	"strconv"
)

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

// Meta is the Kubernetes context of one address. Empty fields are left out
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
type Meta struct {
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
func (m *Meta) AppendJSON(b []byte) []byte {
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
		b = strconv.AppendQuote(b, v)
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

// Source finds the cluster object that holds an address. Cache is the
// informer-backed Source; StaticSource is a fixed one.
type Source interface {
	// Lookup returns the context of ip and true when ip belongs to the
	// cluster (pod, Service or node), false otherwise. It is called
	// concurrently.
	Lookup(ip netip.Addr) (Meta, bool)
}

// StaticSource is a Source with a fixed table (for tests, or to run the
// collector with known addresses outside a cluster). IPv4-mapped IPv6 keys
// are not unmapped: use plain IPv4 keys.
type StaticSource map[netip.Addr]Meta

// Lookup implements Source.
func (s StaticSource) Lookup(ip netip.Addr) (Meta, bool) {
	m, ok := s[ip.Unmap()]
	return m, ok
}

// Resolver resolves addresses: Source first (nil: no cluster), then, for
// addresses it does not hold, Subnets (nil: none).
type Resolver struct {
	Source  Source
	Subnets *Subnets
}

// Resolve returns ip's context and whether Source found it in the cluster.
// An address the cluster does not hold is Kind external, with the label of
// the longest subnet holding it ("" when none does).
func (r *Resolver) Resolve(ip netip.Addr) (Meta, bool) {
	ip = ip.Unmap()
	if r.Source != nil && ip.IsValid() {
		if m, ok := r.Source.Lookup(ip); ok {
			return m, true
		}
	}
	m := Meta{Kind: KindExternal}
	if r.Subnets != nil {
		m.Subnet, _ = r.Subnets.Label(ip)
	}
	return m, false
}

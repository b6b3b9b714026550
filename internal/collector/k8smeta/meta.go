// Package k8smeta resolves IP addresses to Kubernetes context: the pod,
// Service or node that holds an address, the pod's owner workload
// (Deployment through its ReplicaSet, StatefulSet, DaemonSet, CronJob
// through its Job, Job...), its node, and for addresses outside the
// cluster an optional subnet label: an enriched.K8sContext
// (internal/shared/enriched: the flow model the collector and `flowlens
// observe` share). Every name comes from the API server (or the
// operator's --k8s-static file), never from the flows' senders: they are
// the collector's metric labels.
//
// Cache keeps what it needs of Pods, ReplicaSets, Jobs, Services and Nodes in
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

	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// Source finds the cluster object that holds an address. Cache is the
// informer-backed Source; StaticSource is a fixed one.
type Source interface {
	// Lookup returns the context of ip and true when ip belongs to the
	// cluster (pod, Service or node), false otherwise. It is called
	// concurrently.
	Lookup(ip netip.Addr) (enriched.K8sContext, bool)
}

// StaticSource is a Source with a fixed table (for tests, or to run the
// collector with known addresses outside a cluster). IPv4-mapped IPv6 keys
// are not unmapped: use plain IPv4 keys.
type StaticSource map[netip.Addr]enriched.K8sContext

// Lookup implements Source.
func (s StaticSource) Lookup(ip netip.Addr) (enriched.K8sContext, bool) {
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
func (r *Resolver) Resolve(ip netip.Addr) (enriched.K8sContext, bool) {
	ip = ip.Unmap()
	if r.Source != nil && ip.IsValid() {
		if m, ok := r.Source.Lookup(ip); ok {
			return m, true
		}
	}
	m := enriched.K8sContext{Kind: enriched.KindExternal}
	if r.Subnets != nil {
		m.Subnet, _ = r.Subnets.Label(ip)
	}
	return m, false
}

package k8smeta

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// Endpoint is an address the cluster holds and its context.
type Endpoint struct {
	Addr netip.Addr
	Meta enriched.K8sContext
}

// Lister lists the addresses a Source holds: the collector's packet
// capture resolves namespaces, pods and workloads to addresses (and their
// nodes) with it. Cache and StaticSource are Listers.
type Lister interface {
	Endpoints() []Endpoint
}

// Endpoints lists the addresses of the pods that are not finished and not
// host-network (with the context Lookup gives them) and the Services'
// ClusterIPs. Node addresses are not listed: a name filter never means
// them.
func (c *Cache) Endpoints() []Endpoint {
	var out []Endpoint
	for _, obj := range c.pods.GetStore().List() {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.HostNetwork || finished(p) {
			continue
		}
		m := c.podMeta(p)
		for _, s := range podIPs(p) {
			out = append(out, Endpoint{netip.MustParseAddr(s), m})
		}
	}
	for _, obj := range c.svcs.GetStore().List() {
		s, ok := obj.(*corev1.Service)
		if !ok {
			continue
		}
		ips, _ := serviceIPIndex(s)
		for _, ip := range ips {
			out = append(out, Endpoint{netip.MustParseAddr(ip), enriched.K8sContext{Kind: enriched.KindService, Namespace: s.Namespace,
				Name: s.Name, Workload: s.Name, WorkloadKind: enriched.WorkloadService}})
		}
	}
	return out
}

// Endpoints lists the table.
func (s StaticSource) Endpoints() []Endpoint {
	out := make([]Endpoint, 0, len(s))
	for a, m := range s {
		out = append(out, Endpoint{a, m})
	}
	return out
}

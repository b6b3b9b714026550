package k8smeta

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// Resources the Cache watches, as named in Synced and in the
// flowlens_collector_informer_synced metric. The collector's service
// account needs get, list and watch on each.
const (
	ResourcePods        = "pods"
	ResourceReplicaSets = "replicasets"
	ResourceServices    = "services"
	ResourceNodes       = "nodes"
	ResourceJobs        = "jobs"
)

// Resources lists the watched resources.
var Resources = []string{ResourcePods, ResourceReplicaSets, ResourceServices, ResourceNodes, ResourceJobs}

// Index names.
const (
	indexIP     = "ip"     // pods (not host-network), Services, Nodes: address -> objects
	indexHostIP = "hostip" // host-network pods: address -> pods
)

// Cache is a Source backed by shared informers on Pods, ReplicaSets,
// Services, Nodes and Jobs (cluster-wide). Each object is reduced by Transform
// before it is stored, so the cache holds only names, owners, addresses
// and the few fields resolution needs; every address is indexed.
//
// Lookup order for an address: a pod that holds it (not host-network),
// then a Service ClusterIP, then a node address (InternalIP, ExternalIP),
// then a host-network pod's address (resolved to its node). When several
// pods claim one address, as happens for a moment when a pod is deleted
// and its address reused, the pod that still holds it wins: one not
// finished (phase not Succeeded or Failed), then not being deleted, then
// Running, then the newest (creation time, then resource version). Events
// may arrive in any order: the choice is made at lookup time from the
// pods present then.
type Cache struct {
	factory informers.SharedInformerFactory
	pods    cache.SharedIndexInformer
	rs      cache.SharedIndexInformer
	svcs    cache.SharedIndexInformer
	nodes   cache.SharedIndexInformer
	jobs    cache.SharedIndexInformer

	stop     chan struct{}
	stopOnce sync.Once
}

// NewCache creates the informers; Start starts them.
func NewCache(client kubernetes.Interface) (*Cache, error) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(Transform))
	c := &Cache{
		factory: f,
		pods:    f.Core().V1().Pods().Informer(),
		rs:      f.Apps().V1().ReplicaSets().Informer(),
		svcs:    f.Core().V1().Services().Informer(),
		nodes:   f.Core().V1().Nodes().Informer(),
		jobs:    f.Batch().V1().Jobs().Informer(),
		stop:    make(chan struct{}),
	}
	for _, x := range []struct {
		inf cache.SharedIndexInformer
		idx cache.Indexers
	}{
		{c.pods, cache.Indexers{indexIP: podIPIndex, indexHostIP: hostNetIPIndex}},
		{c.svcs, cache.Indexers{indexIP: serviceIPIndex}},
		{c.nodes, cache.Indexers{indexIP: nodeIPIndex}},
	} {
		if err := x.inf.AddIndexers(x.idx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Start starts the informers in the background (once; later calls do
// nothing new).
func (c *Cache) Start() { c.factory.Start(c.stop) }

// Stop stops the informers and waits for them to end.
func (c *Cache) Stop() {
	c.stopOnce.Do(func() { close(c.stop) })
	c.factory.Shutdown()
}

// WaitForSync waits until every informer has listed its resource once, or
// ctx ends (false).
func (c *Cache) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), c.pods.HasSynced, c.rs.HasSynced, c.svcs.HasSynced, c.nodes.HasSynced, c.jobs.HasSynced)
}

// Synced reports, per resource (Resources), whether its informer has
// synced.
func (c *Cache) Synced() map[string]bool {
	return map[string]bool{
		ResourcePods:        c.pods.HasSynced(),
		ResourceReplicaSets: c.rs.HasSynced(),
		ResourceServices:    c.svcs.HasSynced(),
		ResourceNodes:       c.nodes.HasSynced(),
		ResourceJobs:        c.jobs.HasSynced(),
	}
}

// Lookup implements Source.
func (c *Cache) Lookup(ip netip.Addr) (enriched.K8sContext, bool) {
	key := ip.Unmap().String()
	if objs, _ := c.pods.GetIndexer().ByIndex(indexIP, key); len(objs) > 0 {
		if p := bestPod(objs); p != nil {
			return c.podMeta(p), true
		}
	}
	if objs, _ := c.svcs.GetIndexer().ByIndex(indexIP, key); len(objs) > 0 {
		if s := firstByKey[*corev1.Service](objs); s != nil {
			return enriched.K8sContext{Kind: enriched.KindService, Namespace: s.Namespace, Name: s.Name, Workload: s.Name, WorkloadKind: enriched.WorkloadService}, true
		}
	}
	if objs, _ := c.nodes.GetIndexer().ByIndex(indexIP, key); len(objs) > 0 {
		if n := firstByKey[*corev1.Node](objs); n != nil {
			return nodeMeta(n.Name), true
		}
	}
	if objs, _ := c.pods.GetIndexer().ByIndex(indexHostIP, key); len(objs) > 0 {
		if p := bestPod(objs); p != nil && p.Spec.NodeName != "" {
			return nodeMeta(p.Spec.NodeName), true
		}
	}
	return enriched.K8sContext{}, false
}

func nodeMeta(name string) enriched.K8sContext {
	return enriched.K8sContext{Kind: enriched.KindNode, Name: name, Workload: name, WorkloadKind: enriched.WorkloadNode, Node: name}
}

// podMeta is a pod's context, its owner resolved through the ReplicaSet
// and Job caches.
func (c *Cache) podMeta(p *corev1.Pod) enriched.K8sContext {
	m := enriched.K8sContext{Kind: enriched.KindPod, Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName,
		Workload: p.Name, WorkloadKind: enriched.WorkloadPod}
	ref := controllerOf(&p.ObjectMeta)
	if ref == nil {
		return m
	}
	m.Workload, m.WorkloadKind = ref.Name, ref.Kind
	if ref.Kind == "Job" {
		c.jobWorkload(p.Namespace, ref.Name, &m)
		return m
	}
	if ref.Kind != "ReplicaSet" {
		return m
	}
	obj, ok, _ := c.rs.GetIndexer().GetByKey(p.Namespace + "/" + ref.Name)
	if rs, isRS := obj.(*appsv1.ReplicaSet); ok && isRS {
		if owner := controllerOf(&rs.ObjectMeta); owner != nil {
			m.Workload, m.WorkloadKind = owner.Name, owner.Kind
		}
		return m
	}
	// The ReplicaSet is not in the cache (yet): a Deployment names its
	// ReplicaSets <deployment>-<pod-template-hash>, and labels their pods
	// with the hash.
	if h := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; h != "" {
		if d, ok := strings.CutSuffix(ref.Name, "-"+h); ok && d != "" {
			m.Workload, m.WorkloadKind = d, "Deployment"
		}
	}
	return m
}

// jobWorkload sets the workload of a Job's pods, which must not be a new
// label value on every run (docs/metrics.md, Cardinality): a Job a
// controller owns (a CronJob, whose Jobs are named <cronjob>-<scheduled
// minute>; anything else that creates Jobs) is its controller's; a Job
// nobody owns created with generateName (migrate-x7k2p) is the name it
// was generated from, without its "-" (migrate), kind Job; another keeps
// its name, which its creator chose. A Job not in the cache (the collector
// starting; its pods' events before its own) keeps its name until it is.
func (c *Cache) jobWorkload(ns, name string, m *enriched.K8sContext) {
	obj, ok, _ := c.jobs.GetIndexer().GetByKey(ns + "/" + name)
	job, isJob := obj.(*batchv1.Job)
	if !ok || !isJob {
		return
	}
	if owner := controllerOf(&job.ObjectMeta); owner != nil {
		m.Workload, m.WorkloadKind = owner.Name, owner.Kind
		return
	}
	if g := strings.TrimRight(job.GenerateName, "-"); g != "" {
		m.Workload = g
	}
}

func controllerOf(m *metav1.ObjectMeta) *metav1.OwnerReference {
	for i := range m.OwnerReferences {
		if r := &m.OwnerReferences[i]; r.Controller != nil && *r.Controller {
			return r
		}
	}
	return nil
}

// bestPod picks, among pods claiming one address, the one that holds it.
func bestPod(objs []any) *corev1.Pod {
	var best *corev1.Pod
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		if best == nil || podBefore(p, best) {
			best = p
		}
	}
	return best
}

// podBefore reports whether a is likelier than b to hold their shared
// address now.
func podBefore(a, b *corev1.Pod) bool {
	for _, c := range []struct{ a, b bool }{
		{!finished(a), !finished(b)},
		{a.DeletionTimestamp == nil, b.DeletionTimestamp == nil},
		{a.Status.Phase == corev1.PodRunning, b.Status.Phase == corev1.PodRunning},
	} {
		if c.a != c.b {
			return c.a
		}
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	// Creation times have one-second resolution. Resource versions are
	// opaque, but etcd's are increasing revisions: the most recently
	// written pod is the likelier holder.
	ra, ea := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, eb := strconv.ParseUint(b.ResourceVersion, 10, 64)
	if ea == nil && eb == nil && ra != rb {
		return ra > rb
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// firstByKey returns the object with the smallest namespace/name, so that
// an address claimed twice (a misconfiguration) resolves the same way every
// time.
func firstByKey[T metav1.Object](objs []any) T {
	var best T
	var bestKey string
	found := false
	for _, o := range objs {
		t, ok := o.(T)
		if !ok {
			continue
		}
		k := t.GetNamespace() + "/" + t.GetName()
		if !found || k < bestKey {
			best, bestKey, found = t, k, true
		}
	}
	return best
}

// Index functions: addresses in canonical form (netip, IPv4 unmapped).

func podIPIndex(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.HostNetwork {
		return nil, nil
	}
	return podIPs(p), nil
}

func hostNetIPIndex(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || !p.Spec.HostNetwork {
		return nil, nil
	}
	return podIPs(p), nil
}

func podIPs(p *corev1.Pod) []string {
	out := make([]string, 0, 2)
	out = appendIP(out, p.Status.PodIP)
	for _, ip := range p.Status.PodIPs {
		out = appendIP(out, ip.IP)
	}
	return out
}

func serviceIPIndex(obj any) ([]string, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil
	}
	out := appendIP(nil, s.Spec.ClusterIP)
	for _, ip := range s.Spec.ClusterIPs {
		out = appendIP(out, ip)
	}
	return out, nil
}

func nodeIPIndex(obj any) ([]string, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			out = appendIP(out, a.Address)
		}
	}
	return out, nil
}

// appendIP appends s in canonical form if it is an address (not "",
// "None") and not already there.
func appendIP(out []string, s string) []string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return out
	}
	c := a.Unmap().String()
	if slices.Contains(out, c) {
		return out
	}
	return append(out, c)
}

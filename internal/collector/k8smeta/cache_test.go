package k8smeta_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

const syncTimeout = 30 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startCache runs a Cache on the envtest API server until the test ends.
func startCache(t *testing.T) *k8smeta.Cache {
	t.Helper()
	c, err := k8smeta.NewCache(k8s)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
	defer cancel()
	if !c.WaitForSync(ctx) {
		t.Fatalf("informers not synced after %v: %v", syncTimeout, c.Synced())
	}
	for _, r := range k8smeta.Resources {
		if !c.Synced()[r] {
			t.Fatalf("%s not synced: %v", r, c.Synced())
		}
	}
	return c
}

var nsSeq atomic.Int32

// mkNamespace creates a namespace named after base, unique in the API
// server (tests may run again on it: -count).
func mkNamespace(t *testing.T, base string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", base, nsSeq.Add(1))
	if _, err := k8s.CoreV1().Namespaces().Create(ctxT(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// forget deletes an object at once when the test ends (envtest has no
// namespace controller: objects outlive their namespace, and pods their
// addresses).
func forget(t *testing.T, del func(context.Context, string, metav1.DeleteOptions) error, name string) {
	t.Cleanup(func() {
		err := del(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", name, err)
		}
	})
}

func mkNode(t *testing.T, name string, addrs ...corev1.NodeAddress) {
	t.Helper()
	ctx := ctxT(t)
	n, err := k8s.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forget(t, k8s.CoreV1().Nodes().Delete, name)
	n.Status.Addresses = append(addrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	if _, err := k8s.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

var podSpec = corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/app:1"}}}

func template(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}, Spec: podSpec}
}

func selector(app string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
}

func controllerRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: &yes}
}

type podOpts struct {
	owner       *metav1.OwnerReference
	labels      map[string]string
	node        string
	hostNetwork bool
	phase       corev1.PodPhase // default Running
	ips         []string        // status.podIPs (the first is status.podIP)
}

// mkPod creates a pod and writes its status (phase, podIP, podIPs) through
// the status subresource, as a kubelet would.
func mkPod(t *testing.T, ns, name string, o podOpts) *corev1.Pod {
	t.Helper()
	ctx := ctxT(t)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: o.labels}, Spec: *podSpec.DeepCopy()}
	p.Spec.NodeName = o.node
	p.Spec.HostNetwork = o.hostNetwork
	if o.owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*o.owner}
	}
	p, err := k8s.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forget(t, k8s.CoreV1().Pods(ns).Delete, name)
	setPodStatus(t, p, o.phase, o.ips...)
	return p
}

func setPodStatus(t *testing.T, p *corev1.Pod, phase corev1.PodPhase, ips ...string) {
	t.Helper()
	ctx := ctxT(t)
	p, err := k8s.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if phase == "" {
		phase = corev1.PodRunning
	}
	p.Status.Phase = phase
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
		p.Status.PodIPs = nil
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	if p.Spec.HostNetwork && len(ips) > 0 {
		// The API server wants a host-network pod's IPs to be its host's.
		p.Status.HostIP = ips[0]
		p.Status.HostIPs = []corev1.HostIP{{IP: ips[0]}}
	}
	if _, err := k8s.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s/%s status: %v", p.Namespace, p.Name, err)
	}
}

// expect waits until every address resolves to its context.
func expect(t *testing.T, r *k8smeta.Resolver, want map[string]enriched.K8sContext) {
	t.Helper()
	eventually(t, syncTimeout, func() error {
		for ip, w := range want {
			got, in := r.Resolve(netip.MustParseAddr(ip))
			if got != w {
				return fmt.Errorf("%s: got %+v, want %+v", ip, got, w)
			}
			if in != (w.Kind != enriched.KindExternal) {
				return fmt.Errorf("%s: in cluster = %v for %+v", ip, in, got)
			}
		}
		return nil
	})
}

// Pods of every owner kind, a Service, nodes, host-network pods and
// external addresses, all created through the API server, resolve to their
// context.
func TestResolveClusterObjects(t *testing.T) {
	needEnv(t)
	ctx := ctxT(t)
	ns := mkNamespace(t, "shop")
	mkNode(t, "node-a", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.50.11"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.11"})
	mkNode(t, "node-b", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.50.12"})

	// Started before most objects exist: they arrive as watch events.
	c := startCache(t)
	subnets, err := k8smeta.ParseSubnets("corp=172.16.0.0/12, lab=172.16.5.0/24, internet=0.0.0.0/0")
	if err != nil {
		t.Fatal(err)
	}
	r := &k8smeta.Resolver{Source: c, Subnets: subnets}

	apps := k8s.AppsV1().Deployments(ns)
	dep, err := apps.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Selector: selector("web"), Template: template("web")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	depRef := controllerRef("apps/v1", "Deployment", dep.Name, dep.UID)
	rs, err := k8s.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web-5d4f8b", Namespace: ns, OwnerReferences: []metav1.OwnerReference{depRef}},
		Spec:       appsv1.ReplicaSetSpec{Selector: selector("web"), Template: template("web")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A ReplicaSet nobody owns is its pods' workload.
	lone, err := k8s.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "lone", Namespace: ns},
		Spec:       appsv1.ReplicaSetSpec{Selector: selector("lone"), Template: template("lone")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sts, err := k8s.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{Selector: selector("db"), Template: template("db")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := k8s.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "logs", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: selector("logs"), Template: template("logs")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	jobTmpl := template("backup")
	jobTmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job, err := k8s.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "backup", Namespace: ns},
		Spec: batchv1.JobSpec{Template: jobTmpl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := k8s.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k8s.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "headless", Namespace: ns},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"}, Ports: []corev1.ServicePort{{Port: 5432}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Fatalf("service has no ClusterIP: %+v", svc.Spec)
	}

	rsRef := controllerRef("apps/v1", "ReplicaSet", rs.Name, rs.UID)
	mkPod(t, ns, "web-5d4f8b-x7k2p", podOpts{owner: &rsRef, node: "node-a", labels: map[string]string{"app": "web", "pod-template-hash": "5d4f8b"},
		ips: []string{"10.244.1.10", "fd00:10:244:1::a"}})
	// Owned by a ReplicaSet the cache never sees: the Deployment comes
	// from the ReplicaSet's name and the pod-template-hash label.
	ghostRef := controllerRef("apps/v1", "ReplicaSet", "api-7c9dd", "0e8f6c36-0000-4000-8000-000000000001")
	mkPod(t, ns, "api-7c9dd-q2w3e", podOpts{owner: &ghostRef, node: "node-a", labels: map[string]string{"pod-template-hash": "7c9dd"},
		ips: []string{"10.244.1.11"}})
	loneRef := controllerRef("apps/v1", "ReplicaSet", lone.Name, lone.UID)
	mkPod(t, ns, "lone-abcde", podOpts{owner: &loneRef, node: "node-b", ips: []string{"10.244.2.15"}})
	stsRef := controllerRef("apps/v1", "StatefulSet", sts.Name, sts.UID)
	mkPod(t, ns, "db-0", podOpts{owner: &stsRef, node: "node-a", ips: []string{"10.244.1.12"}})
	dsRef := controllerRef("apps/v1", "DaemonSet", ds.Name, ds.UID)
	mkPod(t, ns, "logs-9xk2m", podOpts{owner: &dsRef, node: "node-b", ips: []string{"10.244.2.13"}})
	jobRef := controllerRef("batch/v1", "Job", job.Name, job.UID)
	mkPod(t, ns, "backup-7hj4k", podOpts{owner: &jobRef, node: "node-b", ips: []string{"10.244.2.14"}})
	mkPod(t, ns, "debug", podOpts{node: "node-b", ips: []string{"10.244.2.16"}})
	// Host-network pods: one on its node's InternalIP, one on an address
	// that only the pod tells us belongs to node-b.
	mkPod(t, ns, "proxy-a", podOpts{owner: &dsRef, node: "node-a", hostNetwork: true, ips: []string{"192.168.50.11"}})
	mkPod(t, ns, "proxy-b", podOpts{owner: &dsRef, node: "node-b", hostNetwork: true, ips: []string{"192.168.60.12"}})
	// A pod without an address yet resolves nothing.
	mkPod(t, ns, "pending", podOpts{phase: corev1.PodPending})

	web := enriched.K8sContext{Kind: enriched.KindPod, Namespace: ns, Name: "web-5d4f8b-x7k2p", Workload: "web", WorkloadKind: "Deployment", Node: "node-a"}
	nodeA := enriched.K8sContext{Kind: enriched.KindNode, Name: "node-a", Workload: "node-a", WorkloadKind: "Node", Node: "node-a"}
	nodeB := enriched.K8sContext{Kind: enriched.KindNode, Name: "node-b", Workload: "node-b", WorkloadKind: "Node", Node: "node-b"}
	expect(t, r, map[string]enriched.K8sContext{
		"10.244.1.10":          web,
		"fd00:10:244:1::a":     web,
		"::ffff:10.244.1.10":   web, // IPv4-mapped
		"10.244.1.11":          {Kind: enriched.KindPod, Namespace: ns, Name: "api-7c9dd-q2w3e", Workload: "api", WorkloadKind: "Deployment", Node: "node-a"},
		"10.244.2.15":          {Kind: enriched.KindPod, Namespace: ns, Name: "lone-abcde", Workload: "lone", WorkloadKind: "ReplicaSet", Node: "node-b"},
		"10.244.1.12":          {Kind: enriched.KindPod, Namespace: ns, Name: "db-0", Workload: "db", WorkloadKind: "StatefulSet", Node: "node-a"},
		"10.244.2.13":          {Kind: enriched.KindPod, Namespace: ns, Name: "logs-9xk2m", Workload: "logs", WorkloadKind: "DaemonSet", Node: "node-b"},
		"10.244.2.14":          {Kind: enriched.KindPod, Namespace: ns, Name: "backup-7hj4k", Workload: "backup", WorkloadKind: "Job", Node: "node-b"},
		"10.244.2.16":          {Kind: enriched.KindPod, Namespace: ns, Name: "debug", Workload: "debug", WorkloadKind: "Pod", Node: "node-b"},
		svc.Spec.ClusterIP:     {Kind: enriched.KindService, Namespace: ns, Name: "web", Workload: "web", WorkloadKind: "Service"},
		"192.168.50.11":        nodeA,
		"203.0.113.11":         nodeA,
		"192.168.50.12":        nodeB,
		"192.168.60.12":        nodeB, // host-network pod proxy-b
		"172.16.5.9":           {Kind: enriched.KindExternal, Subnet: "lab"},
		"172.17.0.1":           {Kind: enriched.KindExternal, Subnet: "corp"},
		"8.8.8.8":              {Kind: enriched.KindExternal, Subnet: "internet"},
		"2001:db8::1":          {Kind: enriched.KindExternal},
		"10.244.9.9":           {Kind: enriched.KindExternal, Subnet: "internet"},
		"::ffff:198.51.100.77": {Kind: enriched.KindExternal, Subnet: "internet"},
	})

	// Without subnet labels an unknown address is external with no label.
	bare := &k8smeta.Resolver{Source: c}
	if m, in := bare.Resolve(netip.MustParseAddr("8.8.8.8")); in || m != (enriched.K8sContext{Kind: enriched.KindExternal}) {
		t.Errorf("8.8.8.8 without subnets: %+v, %v", m, in)
	}

	// Service deleted: its ClusterIP is external from then on.
	if err := k8s.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Node address changed.
	n, err := k8s.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.50.22"}}
	if _, err := k8s.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, r, map[string]enriched.K8sContext{
		svc.Spec.ClusterIP: {Kind: enriched.KindExternal, Subnet: "internet"},
		"192.168.50.22":    nodeB,
		"192.168.50.12":    {Kind: enriched.KindExternal, Subnet: "internet"},
	})
}

// The pods of Jobs do not make a new workload value on every run: a
// CronJob's runs are the CronJob (two runs, one workload), a Job created
// with generateName is the name it was generated from, a Job named by its
// creator keeps its name; a Job the cache does not hold keeps its name.
func TestJobWorkloads(t *testing.T) {
	needEnv(t)
	ctx := ctxT(t)
	ns := mkNamespace(t, "batch")
	c := startCache(t)
	r := &k8smeta.Resolver{Source: c}

	tmpl := template("job")
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	cj, err := k8s.BatchV1().CronJobs(ns).Create(ctx, &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
		Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forget(t, k8s.BatchV1().CronJobs(ns).Delete, cj.Name)
	cjRef := controllerRef("batch/v1", "CronJob", cj.Name, cj.UID)
	mkJob := func(job *batchv1.Job) *batchv1.Job {
		t.Helper()
		job.Namespace, job.Spec = ns, batchv1.JobSpec{Template: tmpl}
		job, err := k8s.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		forget(t, k8s.BatchV1().Jobs(ns).Delete, job.Name)
		return job
	}
	podOf := func(job *batchv1.Job, name, ip string) {
		t.Helper()
		ref := controllerRef("batch/v1", "Job", job.Name, job.UID)
		mkPod(t, ns, name, podOpts{owner: &ref, node: "node-a", ips: []string{ip}})
	}
	// Two runs of the CronJob, named as its controller names them.
	run1 := mkJob(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nightly-29000000", OwnerReferences: []metav1.OwnerReference{cjRef}}})
	run2 := mkJob(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nightly-29001440", OwnerReferences: []metav1.OwnerReference{cjRef}}})
	podOf(run1, "nightly-29000000-k2x7p", "10.244.3.1")
	podOf(run2, "nightly-29001440-q8w4z", "10.244.3.2")
	gen := mkJob(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{GenerateName: "migrate-"}})
	podOf(gen, gen.Name+"-abcde", "10.244.3.3")
	once := mkJob(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once"}})
	podOf(once, "once-fghij", "10.244.3.4")
	ghost := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "ghost-1", UID: "0e8f6c36-0000-4000-8000-000000000002"}}
	podOf(ghost, "ghost-1-klmno", "10.244.3.5")

	pod := func(name, workload, kind string) enriched.K8sContext {
		return enriched.K8sContext{Kind: enriched.KindPod, Namespace: ns, Name: name, Workload: workload, WorkloadKind: kind, Node: "node-a"}
	}
	expect(t, r, map[string]enriched.K8sContext{
		"10.244.3.1": pod("nightly-29000000-k2x7p", "nightly", "CronJob"),
		"10.244.3.2": pod("nightly-29001440-q8w4z", "nightly", "CronJob"),
		"10.244.3.3": pod(gen.Name+"-abcde", "migrate", "Job"),
		"10.244.3.4": pod("once-fghij", "once", "Job"),
		"10.244.3.5": pod("ghost-1-klmno", "ghost-1", "Job"),
	})
	if gen.Name == "migrate-" || !strings.HasPrefix(gen.Name, "migrate-") {
		t.Errorf("generated Job name %q", gen.Name)
	}
}

// A pod deleted and its address reused by a new pod resolves to the new
// pod, whatever the order in which the API server's events arrive.
func TestPodIPReuse(t *testing.T) {
	needEnv(t)
	ctx := ctxT(t)
	ns := mkNamespace(t, "reuse")
	c := startCache(t)
	r := &k8smeta.Resolver{Source: c}
	pod := func(name, node string) enriched.K8sContext {
		return enriched.K8sContext{Kind: enriched.KindPod, Namespace: ns, Name: name, Workload: name, WorkloadKind: "Pod", Node: node}
	}
	external := enriched.K8sContext{Kind: enriched.KindExternal}
	now := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}

	// Delete, then add: between the two the address is unknown.
	old := mkPod(t, ns, "old", podOpts{node: "node-1", ips: []string{"10.250.0.1"}})
	expect(t, r, map[string]enriched.K8sContext{"10.250.0.1": pod("old", "node-1")})
	if err := k8s.CoreV1().Pods(ns).Delete(ctx, old.Name, now); err != nil {
		t.Fatal(err)
	}
	expect(t, r, map[string]enriched.K8sContext{"10.250.0.1": external})
	mkPod(t, ns, "new", podOpts{node: "node-2", ips: []string{"10.250.0.1"}})
	expect(t, r, map[string]enriched.K8sContext{"10.250.0.1": pod("new", "node-2")})

	// Add, then delete: the old pod is still there (not yet deleted, then
	// terminating) when the new one claims its address.
	mkPod(t, ns, "a", podOpts{node: "node-1", ips: []string{"10.250.0.2"}})
	expect(t, r, map[string]enriched.K8sContext{"10.250.0.2": pod("a", "node-1")})
	time.Sleep(1100 * time.Millisecond) // creation timestamps have one-second resolution
	mkPod(t, ns, "b", podOpts{node: "node-2", ips: []string{"10.250.0.2"}})
	expect(t, r, map[string]enriched.K8sContext{"10.250.0.2": pod("b", "node-2")})
	// Graceful deletion: with no kubelet the pod stays, terminating.
	if err := k8s.CoreV1().Pods(ns).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, syncTimeout, func() error {
		p, err := k8s.CoreV1().Pods(ns).Get(ctx, "a", metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp == nil {
			return fmt.Errorf("pod a not terminating: %v", err)
		}
		return nil
	})
	expect(t, r, map[string]enriched.K8sContext{"10.250.0.2": pod("b", "node-2")})
	if err := k8s.CoreV1().Pods(ns).Delete(ctx, "a", now); err != nil {
		t.Fatal(err)
	}
	expect(t, r, map[string]enriched.K8sContext{"10.250.0.2": pod("b", "node-2")})

	// A terminating pod loses to a pod that is not, even an older one:
	// d exists (Pending, another address) before c; c is deleted
	// gracefully, then d gets c's address.
	mkPod(t, ns, "d", podOpts{node: "node-2", phase: corev1.PodPending, ips: []string{"10.250.0.4"}})
	time.Sleep(1100 * time.Millisecond)
	mkPod(t, ns, "c", podOpts{node: "node-1", ips: []string{"10.250.0.3"}})
	expect(t, r, map[string]enriched.K8sContext{"10.250.0.3": pod("c", "node-1"), "10.250.0.4": pod("d", "node-2")})
	if err := k8s.CoreV1().Pods(ns).Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	setPodStatus(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d"}}, corev1.PodRunning, "10.250.0.3")
	expect(t, r, map[string]enriched.K8sContext{"10.250.0.3": pod("d", "node-2"), "10.250.0.4": external})

	// A finished pod keeps its podIP in its status, but the address is
	// free: a running pod with it wins, even an older one.
	mkPod(t, ns, "e", podOpts{node: "node-1", ips: []string{"10.250.0.5"}})
	time.Sleep(1100 * time.Millisecond)
	mkPod(t, ns, "job-done", podOpts{node: "node-1", phase: corev1.PodSucceeded, ips: []string{"10.250.0.5"}})
	expect(t, r, map[string]enriched.K8sContext{"10.250.0.5": pod("e", "node-1")})
	// Alone, a finished pod still resolves (a flow evicted just after it ended).
	mkPod(t, ns, "job-alone", podOpts{node: "node-1", phase: corev1.PodSucceeded, ips: []string{"10.250.0.6"}})
	expect(t, r, map[string]enriched.K8sContext{"10.250.0.6": pod("job-alone", "node-1")})
}

// A cache started after the objects exist finds them in its initial list,
// and the transform keeps only what resolution needs.
func TestInitialListAndTransform(t *testing.T) {
	needEnv(t)
	ctx := ctxT(t)
	ns := mkNamespace(t, "stripped")
	big := map[string]string{}
	for i := range 20 {
		big[fmt.Sprintf("example.com/key-%d", i)] = "some long value that the cache must not keep"
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fat", Namespace: ns, Labels: map[string]string{"app": "x", "pod-template-hash": "h1"}, Annotations: big},
		Spec: *podSpec.DeepCopy()}
	p.Spec.NodeName = "node-9"
	if _, err := k8s.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	forget(t, k8s.CoreV1().Pods(ns).Delete, "fat")
	setPodStatus(t, p, corev1.PodRunning, "10.251.0.1")

	c := startCache(t)
	r := &k8smeta.Resolver{Source: c}
	expect(t, r, map[string]enriched.K8sContext{"10.251.0.1": {Kind: enriched.KindPod, Namespace: ns, Name: "fat", Workload: "fat", WorkloadKind: "Pod", Node: "node-9"}})

	// What the informer stores.
	obj, ok := k8smeta.StoredPod(c, ns+"/fat")
	if !ok {
		t.Fatal("pod not in the informer's store")
	}
	if st := obj.(*corev1.Pod); len(st.ManagedFields) != 0 || len(st.Annotations) != 0 || len(st.Spec.Containers) != 0 ||
		len(st.Labels) != 1 || st.Status.PodIP != "10.251.0.1" {
		t.Errorf("stored pod not stripped: %+v", st)
	}

	// What the API server returns, through the transform.
	got, err := k8s.CoreV1().Pods(ns).Get(ctx, "fat", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ManagedFields) == 0 || len(got.Annotations) == 0 || len(got.Spec.Containers) == 0 {
		t.Fatalf("the API server's pod should be complete: %+v", got.ObjectMeta)
	}
	out, err := k8smeta.Transform(got)
	if err != nil {
		t.Fatal(err)
	}
	s := out.(*corev1.Pod)
	if len(s.ManagedFields) != 0 || len(s.Annotations) != 0 || len(s.Spec.Containers) != 0 || len(s.Status.Conditions) != 0 ||
		len(s.Labels) != 1 || s.Labels["pod-template-hash"] != "h1" || s.Spec.NodeName != "node-9" || s.Status.PodIP != "10.251.0.1" ||
		s.Name != "fat" || s.Namespace != ns || s.ResourceVersion == "" {
		t.Errorf("transformed pod: %+v", s)
	}
	again, _ := k8smeta.Transform(s)
	if fmt.Sprintf("%+v", again) != fmt.Sprintf("%+v", s) {
		t.Errorf("transform is not idempotent:\n%+v\n%+v", s, again)
	}
}

package k8smeta_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlens/flowlens/internal/collector/k8smeta"
)

// Endpoints (packet capture's name resolution) lists the running pods'
// addresses, dual-stack, with the context Lookup gives them (the workload
// through the ReplicaSet, the node), and the Services' ClusterIPs; not a
// finished pod, nor a host-network one, nor a node.
func TestEndpoints(t *testing.T) {
	needEnv(t)
	ctx := ctxT(t)
	ns := mkNamespace(t, "cap")
	mkNode(t, "node-cap", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.51.11"})
	c := startCache(t)
	dep, err := k8s.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Selector: selector("web"), Template: template("web")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := k8s.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web-6c8d9", Namespace: ns, OwnerReferences: []metav1.OwnerReference{controllerRef("apps/v1", "Deployment", dep.Name, dep.UID)}},
		Spec:       appsv1.ReplicaSetSpec{Selector: selector("web"), Template: template("web")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rsRef := controllerRef("apps/v1", "ReplicaSet", rs.Name, rs.UID)
	mkPod(t, ns, "web-6c8d9-a", podOpts{owner: &rsRef, node: "node-cap", ips: []string{"10.251.0.5", "fd00:251::5"}})
	mkPod(t, ns, "done", podOpts{node: "node-cap", phase: corev1.PodSucceeded, ips: []string{"10.251.0.6"}})
	mkPod(t, ns, "host", podOpts{node: "node-cap", hostNetwork: true, ips: []string{"192.168.51.11"}})
	svc, err := k8s.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forget(t, k8s.CoreV1().Services(ns).Delete, svc.Name)
	var l k8smeta.Lister = c
	want := []string{
		"10.251.0.5 pod " + ns + "/web-6c8d9-a Deployment/web node-cap",
		"fd00:251::5 pod " + ns + "/web-6c8d9-a Deployment/web node-cap",
		svc.Spec.ClusterIP + " service " + ns + "/web Service/web ",
	}
	slices.Sort(want)
	eventually(t, syncTimeout, func() error {
		var got []string
		for _, e := range l.Endpoints() {
			if e.Meta.Namespace != ns {
				continue
			}
			m := e.Meta
			got = append(got, fmt.Sprintf("%s %s %s/%s %s/%s %s", e.Addr, m.Kind, m.Namespace, m.Name, m.WorkloadKind, m.Workload, m.Node))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("endpoints of %s:\n%s\nwant\n%s", ns, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		return nil
	})
}

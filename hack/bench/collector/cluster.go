package main

import (
	"context"
	"fmt"
	"net/netip"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pod is one pod of the cluster: the flows' endpoints.
type pod struct {
	ip           netip.Addr
	ns, workload string
}

type cluster struct{ pods []pod }

const nodes = 4

// populate creates, in the apiserver, nodes, and per namespace wl
// Deployments' ReplicaSets and their pods (owner references as the
// Deployment controller writes them; no controller runs in envtest), each
// pod with its IP in its status: what both collectors' informers resolve
// an address to (namespace, owner workload).
func populate(ctx context.Context, cfg *rest.Config, nsN, wl, replicas int) (*cluster, error) {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	for n := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", n)}}
		got, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		got.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.0.%d", 10+n)}}
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
	}
	cl := &cluster{}
	yes := true
	for i := range nsN {
		ns := fmt.Sprintf("team-%d", i)
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		for w := range wl {
			dep := fmt.Sprintf("app-%d", w)
			rsName := dep + "-5d8f7c9b6"
			labels := map[string]string{"app": dep}
			rs := &appsv1.ReplicaSet{
				ObjectMeta: metav1.ObjectMeta{Name: rsName, Namespace: ns, Labels: labels,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep,
						UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%04d%08d", i, w)), Controller: &yes}}},
				Spec: appsv1.ReplicaSetSpec{
					Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app"}}}},
				},
			}
			gotRS, err := c.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{})
			if err != nil {
				return nil, err
			}
			for p := range replicas {
				ip := netip.AddrFrom4([4]byte{10, 128, byte(i), byte(w*replicas + p + 1)})
				po := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", rsName, p), Namespace: ns, Labels: labels,
						OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rsName,
							UID: gotRS.UID, Controller: &yes}}},
					Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", p%nodes),
						Containers: []corev1.Container{{Name: "c", Image: "app"}}},
				}
				got, err := c.CoreV1().Pods(ns).Create(ctx, po, metav1.CreateOptions{})
				if err != nil {
					return nil, err
				}
				got.Status.Phase = corev1.PodRunning
				got.Status.PodIP = ip.String()
				got.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
				got.Status.HostIP = fmt.Sprintf("192.168.0.%d", 10+p%nodes)
				if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
					return nil, err
				}
				cl.pods = append(cl.pods, pod{ip: ip, ns: ns, workload: dep})
			}
		}
	}
	return cl, nil
}

// writeKubeconfig writes a kubeconfig reaching cfg's apiserver as its
// administrator, for both collectors.
func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

package k8smeta

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Transform is the informers' transform function: it replaces each Pod,
// ReplicaSet, Job, Service and Node by a copy holding only what resolution
// needs, before the informer stores it, so that the cache's memory is a
// few hundred bytes per object however large the objects are (managed
// fields, annotations, labels, specs and statuses are dropped).
//
// Kept for every object: name, namespace, UID, resource version, creation
// and deletion timestamps, and the controller owner reference (kind, name,
// UID; others dropped). Plus:
//   - Pod: the pod-template-hash label, spec.nodeName, spec.hostNetwork,
//     status.phase, status.podIP(s);
//   - Job: metadata.generateName (its workload's name, cache.go);
//   - Service: spec.clusterIP(s);
//   - Node: status.addresses of type InternalIP and ExternalIP.
//
// It is idempotent, as client-go requires. Other objects pass unchanged.
func Transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		p := &corev1.Pod{ObjectMeta: stripMeta(&o.ObjectMeta)}
		if h, ok := o.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; ok {
			p.Labels = map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: h}
		}
		p.Spec.NodeName = o.Spec.NodeName
		p.Spec.HostNetwork = o.Spec.HostNetwork
		p.Status.Phase = o.Status.Phase
		p.Status.PodIP = o.Status.PodIP
		if len(o.Status.PodIPs) > 0 {
			p.Status.PodIPs = make([]corev1.PodIP, len(o.Status.PodIPs))
			for i, ip := range o.Status.PodIPs {
				p.Status.PodIPs[i] = corev1.PodIP{IP: ip.IP}
			}
		}
		return p, nil
	case *appsv1.ReplicaSet:
		return &appsv1.ReplicaSet{ObjectMeta: stripMeta(&o.ObjectMeta)}, nil
	case *batchv1.Job:
		j := &batchv1.Job{ObjectMeta: stripMeta(&o.ObjectMeta)}
		j.GenerateName = o.GenerateName
		return j, nil
	case *corev1.Service:
		s := &corev1.Service{ObjectMeta: stripMeta(&o.ObjectMeta)}
		s.Spec.ClusterIP = o.Spec.ClusterIP
		if len(o.Spec.ClusterIPs) > 0 {
			s.Spec.ClusterIPs = append([]string(nil), o.Spec.ClusterIPs...)
		}
		return s, nil
	case *corev1.Node:
		n := &corev1.Node{ObjectMeta: stripMeta(&o.ObjectMeta)}
		for _, a := range o.Status.Addresses {
			if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
				n.Status.Addresses = append(n.Status.Addresses, a)
			}
		}
		return n, nil
	}
	return obj, nil
}

func stripMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
	}
	if r := controllerOf(m); r != nil {
		yes := true
		out.OwnerReferences = []metav1.OwnerReference{{Kind: r.Kind, Name: r.Name, UID: r.UID, Controller: &yes}}
	}
	return out
}

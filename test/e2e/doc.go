// Package e2e runs the operator against a whole fake cluster: kwok's
// kwokctl starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler
// and the kwok controller from local builds (`make e2e-assets`), and kwok
// fakes three nodes, so that DaemonSet pods get scheduled, become Running and
// Ready, roll and are garbage-collected like on a real cluster; only no
// container runs.
//
// The operator's manifests (manifests/flowlens-operator.yaml) are applied as
// a user would; the Deployment's pod is fake too, so the operator binary runs
// here instead, impersonating the ServiceAccount the manifests create: the
// test so also proves that the manifests' RBAC is enough. Everything talks
// to the API server on loopback only, never to the fake node or pod
// addresses kwok writes into status.
//
// Run with `make e2e` (build tag e2e).
package e2e

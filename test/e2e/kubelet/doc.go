// Package kubelet runs flowlens on a real one-node Kubernetes cluster:
// the control plane of package cluster (kwok's controller disabled), plus
// containerd, runc, the CNI bridge plugin, kube-proxy and a real kubelet
// registered as the node. The images are built here from the same static
// binaries as the Containerfile's targets and imported into containerd (no
// image can be pulled); flowlens is installed as README says, and its agent
// runs with the securityContext the operator renders.
//
// Run with `make e2e-kubelet` (build tag e2e_kubelet, root); the podtool
// command is the test's own image for the pause container and the traffic.
package kubelet

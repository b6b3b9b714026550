// Package agentns holds the RBAC markers of the operator's Role in the agent
// namespace (flowlens): the rights on objects the operator writes there
// only, which a ClusterRole would grant in every namespace. controller-gen
// writes them to config/agent-namespace/role.yaml (make generate-operator),
// apart from the ClusterRole of internal/operator/controller's markers, so
// that kustomize's namespace of config/default does not move the Role to
// the operator's namespace. A FlowCollector whose spec.namespace is not
// flowlens needs this Role and its RoleBinding in that namespace
// (docs/security.md, Operator RBAC). The code using these rights is in
// internal/operator/controller/security.go and internal/operator/certs.
//
// Secrets: the CA (flowlens-ca), the collector's certificate
// (flowlens-collector-tls), and a user's CA (spec.tls.caSecretRef) read.
// +kubebuilder:rbac:groups="",namespace=flowlens,resources=secrets,verbs=get;create;patch
// NetworkPolicies of spec.networkPolicy.
// +kubebuilder:rbac:groups=networking.k8s.io,namespace=flowlens,resources=networkpolicies,verbs=get;create;patch;delete
// The Certificate of spec.tls.certManager.
// +kubebuilder:rbac:groups=cert-manager.io,namespace=flowlens,resources=certificates,verbs=get;create;patch
package agentns

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
// The agents' and the Kafka collector's objects: ServiceAccounts, Role and
// RoleBinding, ConfigMaps (the agent's configuration, the CA bundle, the
// Kafka collector's), metrics Services, the DaemonSet and the Deployment;
// delete only what the Kafka collector leaves when its exporter goes.
// +kubebuilder:rbac:groups="",namespace=flowlens,resources=serviceaccounts;configmaps;services,verbs=create;patch;delete
// +kubebuilder:rbac:groups=apps,namespace=flowlens,resources=daemonsets,verbs=create;patch
// +kubebuilder:rbac:groups=apps,namespace=flowlens,resources=deployments,verbs=create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,namespace=flowlens,resources=roles;rolebindings,verbs=create;patch
// Secrets: the CA (flowlens-ca), the collector's certificate
// (flowlens-collector-tls), and a user's CA (spec.tls.caSecretRef) read.
// +kubebuilder:rbac:groups="",namespace=flowlens,resources=secrets,verbs=get;create;patch
// NetworkPolicies of spec.networkPolicy.
// +kubebuilder:rbac:groups=networking.k8s.io,namespace=flowlens,resources=networkpolicies,verbs=get;create;patch;delete
// The Certificate of spec.tls.certManager.
// +kubebuilder:rbac:groups=cert-manager.io,namespace=flowlens,resources=certificates,verbs=get;create;patch
package agentns

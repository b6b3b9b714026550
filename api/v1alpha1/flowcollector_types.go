package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SingletonName is the only name a FlowCollector may have: the agent runs once
// per node, so one resource describes the whole cluster.
const SingletonName = "cluster"

// Feature is an optional kernel measurement of the agent.
// +kubebuilder:validation:Enum=drops;rtt;retransmits
type Feature string

// The agent's optional measurements.
const (
	FeatureDrops       Feature = "drops"
	FeatureRTT         Feature = "rtt"
	FeatureRetransmits Feature = "retransmits"
)

// LogLevel is the agent's log verbosity.
// +kubebuilder:validation:Enum=debug;info;warn;error
type LogLevel string

// ExporterType names one of the agent's exporters.
// +kubebuilder:validation:Enum=stdout;grpc
type ExporterType string

// The agent's exporters.
const (
	ExporterStdout ExporterType = "stdout"
	ExporterGRPC   ExporterType = "grpc"
)

// FlowCollectorSpec is the desired state of the flow agent across the cluster.
// A list field that is left out gets its default; an empty list ([]) means none.
type FlowCollectorSpec struct {
	// (List fields with a default are not omitempty, so that from Go a nil
	// list is sent as null and gets the default, and an empty one as [].)

	// Namespace is where the operator runs the agent (DaemonSet, ConfigMap,
	// ServiceAccount, RBAC, metrics Service). The operator creates it if it
	// does not exist, and then owns it. It cannot be changed afterwards.
	// +kubebuilder:default=flowlens
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="namespace is immutable"
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Image is the agent's container image. Empty means the image the
	// operator was built for (its --agent-image flag).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// ImagePullPolicy is the agent container's image pull policy.
	// +kubebuilder:default=IfNotPresent
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// ImagePullSecrets are the Secrets (in Namespace) used to pull Image.
	// +listType=atomic
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// Sampling accounts 1 packet in Sampling; 1 means every packet.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	Sampling int32 `json:"sampling,omitempty"`

	// CacheActiveTimeout is how often the agent evicts flows from the kernel
	// and exports them, as a duration such as 5s or 500ms (100ms to 1h).
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('1h')",message="must be a duration from 100ms to 1h"
	// +optional
	CacheActiveTimeout *metav1.Duration `json:"cacheActiveTimeout,omitempty"`

	// CacheMaxFlows is the size of the in-kernel flow map, per node.
	// +kubebuilder:default=100000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	// +optional
	CacheMaxFlows int32 `json:"cacheMaxFlows,omitempty"`

	// Interfaces lists the interfaces to watch: exact names, or regular
	// expressions written /like this/ (unanchored unless they use ^ and $).
	// Empty means every interface.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	// +optional
	Interfaces []string `json:"interfaces,omitempty"`

	// ExcludeInterfaces lists interfaces never to watch, in the same syntax;
	// it wins over Interfaces. [] excludes nothing.
	// +kubebuilder:default={lo}
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	// +optional
	ExcludeInterfaces []string `json:"excludeInterfaces"`

	// Netns lists the network namespaces to watch: "host" (the node's),
	// "all" (the node's and every named namespace under /var/run/netns, as
	// they appear) or names of namespaces under /var/run/netns. Anything
	// other than just "host" adds the SYS_ADMIN capability, which entering
	// another namespace (setns) requires.
	// +kubebuilder:default={host}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^[^/]+$`
	// +kubebuilder:validation:items:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="!('all' in self) || self.all(n, n == 'all' || n == 'host')",message="\"all\" cannot be combined with namespace names"
	// +kubebuilder:validation:XValidation:rule="self.all(n, n != '.' && n != '..')",message="namespace names cannot be . or .."
	// +listType=set
	// +optional
	Netns []string `json:"netns"`

	// Features are the optional kernel measurements to enable; each costs
	// per-packet work. [] enables none.
	// +kubebuilder:default={drops,rtt,retransmits}
	// +listType=set
	// +optional
	Features []Feature `json:"features"`

	// Exporters are where the agent sends flows: at most one of each type.
	// +kubebuilder:default={{type: stdout}}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +listType=map
	// +listMapKey=type
	// +optional
	Exporters []Exporter `json:"exporters"`

	// Privileged runs the agent as a privileged container. When false the
	// agent gets only the capabilities it needs: BPF, PERFMON, NET_ADMIN and
	// SYS_RESOURCE, plus SYS_ADMIN when Netns is not just "host".
	// +kubebuilder:default=false
	// +optional
	Privileged bool `json:"privileged,omitempty"`

	// Resources are the agent container's compute resources. Unset means
	// requests of 100m CPU and 128Mi memory and a limit of 512Mi memory.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// LogLevel is the agent's log level.
	// +kubebuilder:default=info
	// +optional
	LogLevel LogLevel `json:"logLevel,omitempty"`

	// MetricsPort is the port, on every node (the agent uses the host
	// network), where the agent serves /metrics, /healthz and /readyz.
	// +kubebuilder:default=9400
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	MetricsPort int32 `json:"metricsPort,omitempty"`

	// NodeSelector restricts the agent to matching nodes; it is added to
	// kubernetes.io/os: linux, which the operator always sets.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the agent pods. The default tolerates every taint so
	// that every node, control plane included, is observed; [] tolerates none.
	// +kubebuilder:default={{operator: Exists}}
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations"`

	// Dashboards has the operator deploy flowlens' Grafana dashboards as
	// ConfigMaps for Grafana's dashboard sidecar. Unset deploys none.
	// +optional
	Dashboards *Dashboards `json:"dashboards,omitempty"`
}

// Dashboards deploys the flowlens Grafana dashboards (Traffic, Drops &
// latency, Agent health) as ConfigMaps labelled grafana_dashboard: "1", which
// Grafana's dashboard sidecar loads from the namespaces it watches.
type Dashboards struct {
	// Enabled deploys the dashboards. Turning it off deletes them.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// Namespace is where the dashboard ConfigMaps go, typically Grafana's;
	// it must exist. Empty means spec.namespace. Changing it moves them.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// Exporter is one destination of the agent's flows.
// +kubebuilder:validation:XValidation:rule="self.type == 'grpc' ? has(self.grpc) : !has(self.grpc)",message="grpc must be set for, and only for, type grpc"
type Exporter struct {
	// Type is the exporter: stdout (JSON lines in the agent's log) or grpc.
	// +required
	Type ExporterType `json:"type"`

	// GRPC configures the grpc exporter.
	// +optional
	GRPC *GRPCExporter `json:"grpc,omitempty"`
}

// GRPCExporter sends flows to a flowlens collector over gRPC.
type GRPCExporter struct {
	// TargetHost is the collector's DNS name or IP address, without a port
	// or scheme, e.g. flowlens-collector.flowlens.svc.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	TargetHost string `json:"targetHost"`

	// TargetPort is the collector's gRPC port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +required
	TargetPort int32 `json:"targetPort"`

	// BatchSize is how many flows the agent puts in one gRPC message.
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	BatchSize int32 `json:"batchSize,omitempty"`

	// TLS secures the connection to the collector. Unset means plaintext.
	// +optional
	TLS *ExporterTLS `json:"tls,omitempty"`
}

// ExporterTLS points at Secrets in the agent namespace that the operator mounts
// into the agent pods. The operator never reads them.
// +kubebuilder:validation:XValidation:rule="has(self.caSecretRef) || has(self.clientSecretRef)",message="set caSecretRef, clientSecretRef or both"
type ExporterTLS struct {
	// CASecretRef is a key of a Secret holding the PEM CA bundle that
	// verifies the collector's certificate.
	// +optional
	CASecretRef *SecretKeyRef `json:"caSecretRef,omitempty"`

	// ClientSecretRef names a kubernetes.io/tls Secret whose tls.crt and
	// tls.key the agent presents to the collector (mutual TLS).
	// +optional
	ClientSecretRef *SecretRef `json:"clientSecretRef,omitempty"`
}

// SecretRef names a Secret in the agent namespace.
type SecretRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// SecretKeyRef selects one key of a Secret in the agent namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// Key in the Secret.
	// +kubebuilder:default="ca.crt"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// Condition types and reasons of FlowCollectorStatus.
const (
	// ConditionReady is True when every scheduled agent runs the current
	// configuration and is ready.
	ConditionReady = "Ready"
	// ConditionDegraded is True when the operator cannot bring the agents
	// to the desired state: the spec is invalid or the API server refused an
	// object.
	ConditionDegraded = "Degraded"

	ReasonAgentsReady    = "AgentsReady"    // Ready=True
	ReasonRollingOut     = "RollingOut"     // Ready=False: pods are being updated
	ReasonAgentsNotReady = "AgentsNotReady" // Ready=False: some agents not ready
	ReasonNoNodes        = "NoNodes"        // Ready=False: no node matches
	ReasonInvalidSpec    = "InvalidSpec"    // Ready=False, Degraded=True
	ReasonApplyFailed    = "ApplyFailed"    // Degraded=True
	ReasonAsExpected     = "AsExpected"     // Degraded=False
)

// FlowCollectorStatus is the observed state of the agents.
type FlowCollectorStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// DesiredAgents is the number of nodes that should run the agent.
	// +optional
	DesiredAgents int32 `json:"desiredAgents"`

	// ReadyAgents is the number of nodes whose agent is ready.
	// +optional
	ReadyAgents int32 `json:"readyAgents"`

	// UpdatedAgents is the number of nodes whose agent runs the current
	// configuration.
	// +optional
	UpdatedAgents int32 `json:"updatedAgents"`

	// Namespace is where the agents run.
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Conditions are Ready and Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FlowCollector runs the flowlens agent on every node of the cluster. It is
// cluster-scoped and a singleton: its name must be "cluster".
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=fc
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'cluster'",message="the FlowCollector must be named cluster"
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredAgents`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyAgents`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FlowCollector struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	// +optional
	Spec FlowCollectorSpec `json:"spec,omitempty"`
	// +optional
	Status FlowCollectorStatus `json:"status,omitempty"`
}

// FlowCollectorList is a list of FlowCollectors.
//
// +kubebuilder:object:root=true
type FlowCollectorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FlowCollector `json:"items"`
}

func init() {
	SchemeBuilder.Register(&FlowCollector{}, &FlowCollectorList{})
}

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// SingletonName is the only name a FlowCollector may have: the agent runs once
// per node, so one resource describes the whole cluster.
const SingletonName = "cluster"

// LogLevel is the agent's log verbosity.
// +kubebuilder:validation:Enum=debug;info;warn;error
type LogLevel string

// ExporterType names one of the agent's exporters.
// +kubebuilder:validation:Enum=stdout;grpc;ipfix;kafka;otlp
type ExporterType string

// The agent's exporters.
const (
	ExporterStdout ExporterType = "stdout"
	ExporterGRPC   ExporterType = "grpc"
	// ExporterIPFIX sends flows as IPFIX (RFC 7011) to any IPFIX collector:
	// docs/export.md.
	ExporterIPFIX ExporterType = "ipfix"
	// ExporterKafka writes flows to a Kafka topic, which the collector
	// Deployment the operator then runs consumes as a consumer group:
	// docs/export.md.
	ExporterKafka ExporterType = "kafka"
	// ExporterOTLP sends flows as OpenTelemetry log records to an OTLP
	// receiver: docs/export.md.
	ExporterOTLP ExporterType = "otlp"
)

// IPFIXTransport is the transport of the ipfix exporter.
// +kubebuilder:validation:Enum=udp;tcp
type IPFIXTransport string

// The ipfix exporter's transports.
const (
	IPFIXUDP IPFIXTransport = "udp"
	IPFIXTCP IPFIXTransport = "tcp"
)

// FlowCollectorSpec is the desired state of flowlens across the cluster: the
// settings shared by everything the operator deploys at the top, the node
// agent's under agent. A list field that is left out gets its default; an
// empty list ([]) means none.
type FlowCollectorSpec struct {
	// (List fields with a default are not omitempty, so that from Go a nil
	// list is sent as null and gets the default, and an empty one as [].)

	// Namespace is where the operator runs flowlens: the agent (DaemonSet,
	// ConfigMap, ServiceAccount, RBAC, metrics Service), and where the
	// Secrets that the exporters and spec.agent.imagePullSecrets name must
	// be. The operator creates it if it does not exist, and then owns it. It
	// cannot be changed afterwards.
	// +kubebuilder:default=flowlens
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="namespace is immutable"
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Agent configures the flowlens agent, the DaemonSet that runs on every
	// node, and its configuration file. Left out, every agent setting gets
	// its default.
	// +kubebuilder:default={}
	// +optional
	Agent AgentSpec `json:"agent"`

	// Exporters are where the agent sends flows: at most one of each type.
	// +kubebuilder:default={{type: stdout}}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=5
	// +listType=map
	// +listMapKey=type
	// +optional
	Exporters []Exporter `json:"exporters"`

	// Collector configures the collector Deployment the operator runs when
	// Exporters has a kafka exporter: collectors that consume the Kafka topic
	// as one consumer group. Without a kafka exporter it is unused.
	// +kubebuilder:default={}
	// +optional
	Collector CollectorSpec `json:"collector"`

	// Dashboards has the operator deploy flowlens' Grafana dashboards as
	// ConfigMaps for Grafana's dashboard sidecar. Unset deploys none.
	// +optional
	Dashboards *Dashboards `json:"dashboards,omitempty"`

	// TLS is where the certificates of the agents' connection to the
	// collector come from. Left out, the operator runs its own CA
	// (docs/security.md): it keeps the CA in the Secret flowlens-ca, the
	// collector's serving certificate in the Secret flowlens-collector-tls
	// and the CA bundle in the ConfigMap flowlens-ca (key ca.crt), all in
	// spec.namespace, and renews each at two thirds of its life.
	// +kubebuilder:default={}
	// +optional
	TLS TLSSpec `json:"tls"`

	// NetworkPolicy has the operator restrict the traffic into the pods of
	// spec.namespace with NetworkPolicies (docs/security.md).
	// +kubebuilder:default={}
	// +optional
	NetworkPolicy NetworkPolicySpec `json:"networkPolicy"`

	// MetricsPlaintext serves the agents' and the Kafka collectors'
	// /metrics, /healthz and /readyz over plain HTTP, to anyone who reaches
	// their port, where spec.agent.metricsTLS or spec.collector.metricsTLS
	// is unset. False (the default): they serve HTTPS with the operator's
	// Secret flowlens-metrics-tls, and /metrics only to a client
	// certificate of the CA of spec.tls, Prometheus' scrape identity in the
	// Secret flowlens-metrics-client (docs/security.md).
	// +optional
	MetricsPlaintext bool `json:"metricsPlaintext,omitempty"`
}

// TLSSpec chooses who issues the collector's serving certificate: the
// operator from its own CA (neither field), the operator from a CA the user
// supplies (caSecretRef), or cert-manager (certManager).
// +kubebuilder:validation:XValidation:rule="!(has(self.caSecretRef) && has(self.certManager))",message="set caSecretRef or certManager, not both"
type TLSSpec struct {
	// CASecretRef names a kubernetes.io/tls Secret in spec.namespace whose
	// tls.crt (a CA certificate) and tls.key the operator issues the
	// collector's certificate from, instead of a CA of its own. The
	// operator never renews it; when you replace it, the published bundle
	// holds the old and the new CA until the old one expires.
	// +optional
	CASecretRef *SecretRef `json:"caSecretRef,omitempty"`

	// CertManager has cert-manager issue the collector's certificate: the
	// operator applies a cert-manager Certificate whose Secret is
	// flowlens-collector-tls, and publishes that Secret's ca.crt as the
	// ConfigMap flowlens-ca. cert-manager renews it.
	// +optional
	CertManager *CertManagerTLS `json:"certManager,omitempty"`
}

// CertManagerTLS is the cert-manager issuer of the collector's certificate.
type CertManagerTLS struct {
	// IssuerRef is the cert-manager Issuer (in spec.namespace) or
	// ClusterIssuer to use. It must put the CA in the Secret's ca.crt (a CA
	// or self-signed issuer does).
	// +required
	IssuerRef CertManagerIssuerRef `json:"issuerRef"`
}

// CertManagerIssuerRef names a cert-manager issuer.
type CertManagerIssuerRef struct {
	// Name of the issuer.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// Kind of the issuer.
	// +kubebuilder:default=Issuer
	// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
	// +optional
	Kind string `json:"kind,omitempty"`

	// Group of the issuer: cert-manager.io, or an external issuer's.
	// +kubebuilder:default=cert-manager.io
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
}

// NetworkPolicySpec configures the NetworkPolicies of spec.namespace.
type NetworkPolicySpec struct {
	// Enable has the operator apply the NetworkPolicies: the collectors
	// accept gRPC only from the agents (which run in the nodes' network, so
	// from the nodes' addresses) and their metrics port only from
	// metricsNamespaces. The agents run in the host network, where
	// NetworkPolicies do not apply. Requires a network plugin that enforces
	// NetworkPolicies.
	// +kubebuilder:default=true
	// +optional
	Enable *bool `json:"enable,omitempty"`

	// MetricsNamespaces are the namespaces whose pods may scrape the
	// collectors' metrics port (9401).
	// +kubebuilder:default={monitoring}
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	// +optional
	MetricsNamespaces []string `json:"metricsNamespaces"`

	// AgentCIDRs are the addresses the agents connect from: the nodes'
	// addresses (the agents use the host network). Empty: any address
	// outside the cluster's pods, which is what a node's address is to a
	// NetworkPolicy (ipBlock 0.0.0.0/0 and ::/0).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +optional
	AgentCIDRs []string `json:"agentCIDRs,omitempty"`
}

// AgentSpec configures the node agent: its DaemonSet (image, privileges,
// resources, scheduling) and its configuration file (what it watches, how it
// samples, filters and measures).
type AgentSpec struct {
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

	// ImagePullSecrets are the Secrets (in spec.namespace) used to pull Image.
	// +listType=atomic
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// PriorityClassName is the agent pods' PriorityClass. The default,
	// system-node-critical, keeps the node agent scheduled (and not evicted
	// first) on a node under pressure; the class must exist.
	// +kubebuilder:default=system-node-critical
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// Sampling accounts 1 packet in Sampling; 1 means every packet.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	Sampling int32 `json:"sampling,omitempty"`

	// FlowFilter selects, in the kernel, which flows the agent keeps and at
	// what sampling rate. Unset keeps every flow.
	// +optional
	FlowFilter *FlowFilter `json:"flowFilter,omitempty"`

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

	// OverlayOuterFlows also exports the node-to-node tunnel flows (VXLAN,
	// Geneve, IP-in-IP) as records of their own, marked overlay_outer:
	// their packets are counted in their inner flows too, so sums over
	// flows skip them. It adds two maps of CacheMaxFlows entries to each
	// agent's memory. The agent's --overlay-outer-flows.
	// +kubebuilder:default=false
	// +optional
	OverlayOuterFlows bool `json:"overlayOuterFlows,omitempty"`

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
	// +kubebuilder:default={drops,rtt,retransmits,tcp}
	// +listType=set
	// +optional
	Features []Feature `json:"features"`

	// DNSPorts are the ports, UDP and TCP, on which the dns feature reads
	// DNS messages (1 to 4 ports). Used only when Features has dns.
	// +kubebuilder:default={53}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	// +listType=atomic
	// +optional
	DNSPorts []int32 `json:"dnsPorts"`

	// DNSTimeout is how long a DNS query may go unanswered before its flow
	// reports a DNS timeout, as a duration such as 5s or 500ms (100ms to
	// 1m). Used only when Features has dns.
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('1m')",message="must be a duration from 100ms to 1m"
	// +optional
	DNSTimeout *metav1.Duration `json:"dnsTimeout,omitempty"`

	// Capture configures on-demand packet capture (`flowlens capture`,
	// docs/capture.md) on the agents. Left out, the agents accept capture
	// requests and copy at most 128 bytes of each packet (headers only).
	// +kubebuilder:default={}
	// +optional
	Capture AgentCapture `json:"capture"`

	// Privileged runs the agent as a privileged container. When false the
	// agent gets only the capabilities it needs: BPF, PERFMON and
	// NET_ADMIN, plus SYS_ADMIN when Netns is not just "host".
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

	// MetricsPort is the port, on every node's address (the agent uses the
	// host network and binds the node's address, status.hostIP), where
	// the agent serves /metrics, /healthz and /readyz.
	// +kubebuilder:default=9400
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	MetricsPort int32 `json:"metricsPort,omitempty"`

	// MetricsTLS serves /metrics, /healthz and /readyz on MetricsPort over
	// HTTPS with Secrets of your own, optionally requiring client
	// certificates. Unset means the operator's default (HTTPS with the
	// Secret flowlens-metrics-tls, /metrics only to the scrape identity),
	// or plain HTTP with spec.metricsPlaintext.
	// +optional
	MetricsTLS *MetricsTLS `json:"metricsTLS,omitempty"`

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
}

// AgentCapture configures the agents' side of on-demand packet capture. A
// capture runs only while someone asks for one, and asking needs its own
// permission (create flowcollectors/capture, the ClusterRole
// flowlens-capture: docs/security.md).
type AgentCapture struct {
	// Enable has the agents accept capture requests (--capture). False:
	// they refuse every one, with an error saying capture is disabled.
	// +kubebuilder:default=true
	// +optional
	Enable *bool `json:"enable,omitempty"`

	// MaxSnaplen is the most bytes the agents copy of a packet
	// (--capture-max-snaplen, at most 65000: a copy fits one perf sample);
	// a request asking more is clamped to it, and its result says so. The
	// default, 128, holds the headers but little or no payload; raise it
	// only for those who may read payloads.
	// +kubebuilder:default=128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65000
	// +optional
	MaxSnaplen int32 `json:"maxSnaplen,omitempty"`
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

// CollectorSpec configures the collector Deployment the operator runs with a
// kafka exporter: flowlens collectors that consume the exporter's topic as
// one Kafka consumer group, so that they share its partitions.
type CollectorSpec struct {
	// Replicas is the number of collector pods. Each consumes a share of
	// the topic's partitions, so more replicas than partitions leave some
	// idle.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Image is the collector's container image. Empty means the image the
	// operator was built for (its --collector-image flag).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// ImagePullPolicy is the collector container's image pull policy.
	// +kubebuilder:default=IfNotPresent
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Resources are the collector container's compute resources. Unset
	// means requests of 100m CPU and 64Mi memory and a limit of 512Mi memory.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// MetricsTLS serves the collectors' /metrics, /healthz and /readyz on
	// port 9401 over HTTPS with Secrets of your own, optionally requiring
	// client certificates, as spec.agent.metricsTLS does the agents'. The
	// collectors are scraped at their pods' addresses through the headless
	// Service flowlens-collector-kafka. Unset means the operator's default,
	// as for the agents, or plain HTTP with spec.metricsPlaintext.
	// +optional
	MetricsTLS *MetricsTLS `json:"metricsTLS,omitempty"`

	// ServeGRPC has the collectors also serve the flowlens gRPC API (agents'
	// Export, `flowlens observe`'s GetFlows) on port 9990, over TLS with the
	// certificate of spec.tls and with Kubernetes authorization. Unset, they
	// only consume Kafka (--listen ""): nothing can reach them but the
	// metrics port.
	// +optional
	ServeGRPC bool `json:"serveGRPC,omitempty"`
}

// FilterAction is what a flow filter rule does with the flows it matches.
// +kubebuilder:validation:Enum=accept;reject
type FilterAction string

// The flow filter actions.
const (
	FilterAccept FilterAction = "accept"
	FilterReject FilterAction = "reject"
)

// FilterDirection is the direction of a packet through an interface.
// +kubebuilder:validation:Enum=ingress;egress
type FilterDirection string

// The directions a flow filter rule can match.
const (
	FilterIngress FilterDirection = "ingress"
	FilterEgress  FilterDirection = "egress"
)

// TCPFlag is a TCP flag a flow filter rule can match, or one of the
// combinations SYN-ACK, FIN-ACK and RST-ACK (both flags in one packet).
// +kubebuilder:validation:Enum=FIN;SYN;RST;PSH;ACK;URG;ECE;CWR;SYN-ACK;FIN-ACK;RST-ACK
type TCPFlag string

// FlowFilter is the agent's in-kernel flow filter (agent keys filter_rules
// and filter_default; docs/filters.md has the semantics, including which rule
// wins when several match).
type FlowFilter struct {
	// (Rule names are checked on the list because a rule cannot see its
	// siblings. The message names the last rule whose name an earlier rule
	// has, found with lastIndexOf since CEL has no indexed loop, through
	// format(): the API server can bound its cost, not that of string(int)
	// concatenation. The list is atomic: its order matters.)

	// Rules are the filter rules, at most 64. A flow matches a rule when it
	// matches every field the rule gives (none: every flow); when several
	// match, the longest cidr wins, then the longest peerCIDR, then the first
	// listed.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule=`self.all(r, !has(r.name) || self.exists_one(s, has(s.name) && s.name == r.name))`,messageExpression=`'rules[%d].name: "%s" is already the name of an earlier rule: rule names must be unique'.format([self.lastIndexOf(self.filter(r, has(r.name) && !self.exists_one(s, has(s.name) && s.name == r.name))[self.filter(r, has(r.name) && !self.exists_one(s, has(s.name) && s.name == r.name)).size() - 1]), self[self.lastIndexOf(self.filter(r, has(r.name) && !self.exists_one(s, has(s.name) && s.name == r.name))[self.filter(r, has(r.name) && !self.exists_one(s, has(s.name) && s.name == r.name)).size() - 1])].name])`
	// +listType=atomic
	// +optional
	Rules []FlowFilterRule `json:"rules,omitempty"`

	// Default is what happens to the flows no rule matches. Unset, it is the
	// agent's default, reject: once there are rules, they list what to keep.
	// With no rules every flow is kept, whatever Default says.
	// +optional
	Default FilterAction `json:"default,omitempty"`
}

// FlowFilterRule matches flows by their packets' fields and accepts or
// rejects them. The agent's configuration has the same keys in snake_case.
// The API server checks a rule as the agent does at start, so that a rule it
// admits does not stop the agents.
// +kubebuilder:validation:XValidation:rule=`self.action == 'accept' || !has(self.drops) || !self.drops`,fieldPath=`.drops`,message=`drops needs action accept: a reject rule keeps nothing`
// +kubebuilder:validation:XValidation:rule=`self.action == 'accept' || !has(self.sampling)`,fieldPath=`.sampling`,message=`sampling needs action accept: a reject rule keeps nothing`
// +kubebuilder:validation:XValidation:rule=`!has(self.cidr) || !has(self.peerCIDR) || (isCIDR(self.cidr) ? cidr(self.cidr).ip().family() : isIP(self.cidr) ? ip(self.cidr).family() : 0) == (isCIDR(self.peerCIDR) ? cidr(self.peerCIDR).ip().family() : isIP(self.peerCIDR) ? ip(self.peerCIDR).family() : 0)`,fieldPath=`.peerCIDR`,message=`cidr and peerCIDR must both be IPv4 or both IPv6: a flow has one address family`
// +kubebuilder:validation:XValidation:rule=`!has(self.protocol) || !has(self.cidr) || !(string(self.protocol) in ['icmp', 'icmpv6', '1', '58']) || (isCIDR(self.cidr) ? cidr(self.cidr).ip().family() : isIP(self.cidr) ? ip(self.cidr).family() : 0) != (string(self.protocol) in ['icmp', '1'] ? 6 : 4)`,fieldPath=`.protocol`,messageExpression=`'protocol ' + string(self.protocol) + ' cannot match cidr ' + self.cidr + ': use ' + (string(self.protocol) in ['icmp', '1'] ? 'icmpv6' : 'icmp') + ' for IPv' + (string(self.protocol) in ['icmp', '1'] ? '6' : '4')`
// +kubebuilder:validation:XValidation:rule=`!has(self.protocol) || !has(self.peerCIDR) || !(string(self.protocol) in ['icmp', 'icmpv6', '1', '58']) || (isCIDR(self.peerCIDR) ? cidr(self.peerCIDR).ip().family() : isIP(self.peerCIDR) ? ip(self.peerCIDR).family() : 0) != (string(self.protocol) in ['icmp', '1'] ? 6 : 4)`,fieldPath=`.protocol`,messageExpression=`'protocol ' + string(self.protocol) + ' cannot match peerCIDR ' + self.peerCIDR + ': use ' + (string(self.protocol) in ['icmp', '1'] ? 'icmpv6' : 'icmp') + ' for IPv' + (string(self.protocol) in ['icmp', '1'] ? '6' : '4')`
// +kubebuilder:validation:XValidation:rule=`!has(self.ports) || !has(self.protocol) || string(self.protocol) in ['tcp', 'udp', 'sctp', '6', '17', '132']`,fieldPath=`.ports`,messageExpression=`'ports need protocol tcp, udp or sctp, not ' + string(self.protocol)`
// +kubebuilder:validation:XValidation:rule=`!has(self.sourcePorts) || !has(self.protocol) || string(self.protocol) in ['tcp', 'udp', 'sctp', '6', '17', '132']`,fieldPath=`.sourcePorts`,messageExpression=`'sourcePorts need protocol tcp, udp or sctp, not ' + string(self.protocol)`
// +kubebuilder:validation:XValidation:rule=`!has(self.destinationPorts) || !has(self.protocol) || string(self.protocol) in ['tcp', 'udp', 'sctp', '6', '17', '132']`,fieldPath=`.destinationPorts`,messageExpression=`'destinationPorts need protocol tcp, udp or sctp, not ' + string(self.protocol)`
// +kubebuilder:validation:XValidation:rule=`!has(self.icmpType) || !has(self.protocol) || string(self.protocol) in ['icmp', 'icmpv6', '1', '58']`,fieldPath=`.icmpType`,messageExpression=`'icmpType needs protocol icmp or icmpv6, not ' + string(self.protocol)`
// +kubebuilder:validation:XValidation:rule=`!has(self.icmpCode) || !has(self.protocol) || string(self.protocol) in ['icmp', 'icmpv6', '1', '58']`,fieldPath=`.icmpCode`,messageExpression=`'icmpCode needs protocol icmp or icmpv6, not ' + string(self.protocol)`
// +kubebuilder:validation:XValidation:rule=`!has(self.icmpCode) || has(self.icmpType)`,fieldPath=`.icmpCode`,message=`icmpCode needs icmpType: a code means something only within its type`
// +kubebuilder:validation:XValidation:rule=`!has(self.icmpType) || !(has(self.ports) || has(self.sourcePorts) || has(self.destinationPorts))`,fieldPath=`.icmpType`,message=`icmpType cannot go with ports, sourcePorts or destinationPorts: ICMP packets have no ports`
// +kubebuilder:validation:XValidation:rule=`!has(self.tcpFlags) || !has(self.protocol) || string(self.protocol) in ['tcp', '6']`,fieldPath=`.tcpFlags`,messageExpression=`'tcpFlags need protocol tcp, not ' + string(self.protocol)`
// +kubebuilder:validation:XValidation:rule=`!has(self.tcpFlags) || !has(self.icmpType)`,fieldPath=`.tcpFlags`,message=`tcpFlags cannot go with icmpType: ICMP packets have no TCP flags`
type FlowFilterRule struct {
	// Name identifies the rule in the agent's metrics (rule label) and
	// errors; unique among the rules. Unset, the rule is known by its index.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?$`
	// +optional
	Name string `json:"name,omitempty"`

	// Action is what happens to the flows the rule matches: accept keeps
	// them (at the rule's sampling rate), reject drops them in the kernel.
	// +required
	Action FilterAction `json:"action"`

	// CIDR matches flows with an address, source or destination, in this
	// range (e.g. 10.0.0.0/16 or fd00::/64; an address alone is a /32 or
	// /128).
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`isCIDR(self) || isIP(self)`,message=`not a CIDR or an IP address: write e.g. 10.0.0.0/16, fd00::/64 or 10.0.0.1`
	// +kubebuilder:validation:XValidation:rule=`!isCIDR(self) || cidr(self) == cidr(self).masked()`,messageExpression=`'has host bits set: write %s'.format([string(cidr(self).masked())])`
	// +optional
	CIDR string `json:"cidr,omitempty"`

	// PeerCIDR, with CIDR, matches flows whose other side is in this range
	// (either way round); alone, flows with either side in it. Same syntax
	// as CIDR, same family.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`isCIDR(self) || isIP(self)`,message=`not a CIDR or an IP address: write e.g. 10.0.0.0/16, fd00::/64 or 10.0.0.1`
	// +kubebuilder:validation:XValidation:rule=`!isCIDR(self) || cidr(self) == cidr(self).masked()`,messageExpression=`'has host bits set: write %s'.format([string(cidr(self).masked())])`
	// +optional
	PeerCIDR string `json:"peerCIDR,omitempty"`

	// Direction matches packets entering (ingress) or leaving (egress) an
	// interface.
	// +optional
	Direction FilterDirection `json:"direction,omitempty"`

	// Protocol matches the IP protocol: tcp, udp, icmp, icmpv6, sctp, or a
	// protocol number from 0 to 255 (a number or a string).
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=6
	// +kubebuilder:validation:XValidation:rule=`type(self) == int ? self >= 0 && self <= 255 : self in ['tcp', 'udp', 'icmp', 'icmpv6', 'sctp'] || self.matches('^(0|[1-9][0-9]{0,2})$') && int(self) <= 255`,message=`unknown protocol: use tcp, udp, icmp, icmpv6, sctp or a protocol number from 0 to 255`
	// +optional
	Protocol *intstr.IntOrString `json:"protocol,omitempty"`

	// (A port list is checked in three steps: its syntax; each port's range,
	// with a regular expression, cheaper than splitting the list; each
	// range's order. The last two pass a list of bad syntax, which so gets
	// one message. The 64-character limit keeps the estimated CEL cost of 64
	// rules within the API server's budget.)

	// Ports matches flows whose source or destination port is in it: a port
	// (443), a range (80-100) or a comma-separated list of them
	// (80,443,8000-8100), ports from 0 to 65535; a number or a string. Needs
	// protocol tcp, udp or sctp, or none (then it matches those three).
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`type(self) == int || self.matches('^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$')`,message=`not a port list: write a port (443), a range (80-100) or a comma-separated list of them (80,8000-8100)`
	// +kubebuilder:validation:XValidation:rule=`type(self) == int ? self >= 0 && self <= 65535 : !self.matches('^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$') || self.matches('^0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)(-0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0))?(,0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)(-0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0))?)*$')`,message=`ports must be from 0 to 65535`
	// +kubebuilder:validation:XValidation:rule=`type(self) == int || !self.matches('^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$') || self.split(',').all(p, !p.contains('-') || int(p.substring(0, p.indexOf('-'))) <= int(p.substring(p.indexOf('-') + 1)))`,message=`a port range goes from low to high, e.g. 80-100, not 100-80`
	// +optional
	Ports *intstr.IntOrString `json:"ports,omitempty"`

	// SourcePorts matches the source port; written as Ports.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`type(self) == int || self.matches('^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$')`,message=`not a port list: write a port (443), a range (80-100) or a comma-separated list of them (80,8000-8100)`
	// +kubebuilder:validation:XValidation:rule=`type(self) == int ? self >= 0 && self <= 65535 : !self.matches('^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$') || self.matches('^0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)(-0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0))?(,0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)(-0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0))?)*$')`,message=`ports must be from 0 to 65535`
	// +kubebuilder:validation:XValidation:rule=`type(self) == int || !self.matches('^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$') || self.split(',').all(p, !p.contains('-') || int(p.substring(0, p.indexOf('-'))) <= int(p.substring(p.indexOf('-') + 1)))`,message=`a port range goes from low to high, e.g. 80-100, not 100-80`
	// +optional
	SourcePorts *intstr.IntOrString `json:"sourcePorts,omitempty"`

	// DestinationPorts matches the destination port; written as Ports.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`type(self) == int || self.matches('^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$')`,message=`not a port list: write a port (443), a range (80-100) or a comma-separated list of them (80,8000-8100)`
	// +kubebuilder:validation:XValidation:rule=`type(self) == int ? self >= 0 && self <= 65535 : !self.matches('^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$') || self.matches('^0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)(-0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0))?(,0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)(-0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0))?)*$')`,message=`ports must be from 0 to 65535`
	// +kubebuilder:validation:XValidation:rule=`type(self) == int || !self.matches('^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$') || self.split(',').all(p, !p.contains('-') || int(p.substring(0, p.indexOf('-'))) <= int(p.substring(p.indexOf('-') + 1)))`,message=`a port range goes from low to high, e.g. 80-100, not 100-80`
	// +optional
	DestinationPorts *intstr.IntOrString `json:"destinationPorts,omitempty"`

	// ICMPType matches the ICMP or ICMPv6 type, 0 to 255.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	// +optional
	ICMPType *int32 `json:"icmpType,omitempty"`

	// ICMPCode matches the ICMP or ICMPv6 code, 0 to 255; needs ICMPType.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	// +optional
	ICMPCode *int32 `json:"icmpCode,omitempty"`

	// TCPFlags matches TCP packets with all the flags of at least one entry:
	// SYN matches SYN and SYN-ACK packets, SYN-ACK only the latter.
	// +kubebuilder:validation:MaxItems=11
	// +listType=set
	// +optional
	TCPFlags []TCPFlag `json:"tcpFlags,omitempty"`

	// Drops, when true, matches only flows that saw a kernel drop.
	// +optional
	Drops bool `json:"drops,omitempty"`

	// Interfaces matches packets on these interfaces: exact names, or
	// regular expressions written /like this/, as in spec.agent.interfaces.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	// +optional
	Interfaces []string `json:"interfaces,omitempty"`

	// Sampling keeps 1 packet in Sampling of the flows this rule accepts,
	// instead of spec.agent.sampling; 1 keeps every packet.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Sampling int32 `json:"sampling,omitempty"`
}

// Exporter is one destination of the agent's flows.
// +kubebuilder:validation:XValidation:rule="self.type == 'grpc' ? has(self.grpc) : !has(self.grpc)",message="grpc must be set for, and only for, type grpc"
// +kubebuilder:validation:XValidation:rule="self.type == 'ipfix' ? has(self.ipfix) : !has(self.ipfix)",message="ipfix must be set for, and only for, type ipfix"
// +kubebuilder:validation:XValidation:rule="self.type == 'kafka' ? has(self.kafka) : !has(self.kafka)",message="kafka must be set for, and only for, type kafka"
// +kubebuilder:validation:XValidation:rule="self.type == 'otlp' ? has(self.otlp) : !has(self.otlp)",message="otlp must be set for, and only for, type otlp"
type Exporter struct {
	// Type is the exporter: stdout (JSON lines in the agent's log), grpc
	// (to a flowlens collector), ipfix (to any IPFIX collector), kafka (to a
	// Kafka topic, consumed by collectors the operator runs) or otlp (to an
	// OpenTelemetry receiver).
	// +required
	Type ExporterType `json:"type"`

	// GRPC configures the grpc exporter.
	// +optional
	GRPC *GRPCExporter `json:"grpc,omitempty"`

	// IPFIX configures the ipfix exporter.
	// +optional
	IPFIX *IPFIXExporter `json:"ipfix,omitempty"`

	// Kafka configures the kafka exporter, and the collectors that consume
	// its topic.
	// +optional
	Kafka *KafkaExporter `json:"kafka,omitempty"`

	// OTLP configures the otlp exporter.
	// +optional
	OTLP *OTLPExporter `json:"otlp,omitempty"`
}

// KafkaCompression is the compression of the kafka exporter's record batches.
// +kubebuilder:validation:Enum=none;lz4;zstd
type KafkaCompression string

// KafkaAcks is how many replicas must have a record before the broker
// acknowledges it.
// +kubebuilder:validation:Enum=all;leader;none
type KafkaAcks string

// KafkaMessage is what one Kafka record holds: a FlowBatch of flows, or one
// Flow.
// +kubebuilder:validation:Enum=batch;flow
type KafkaMessage string

// KafkaSASLMechanism is how the agent and the collectors authenticate to the
// brokers.
// +kubebuilder:validation:Enum=plain;scram-sha-512
type KafkaSASLMechanism string

// The kafka exporter's settings.
const (
	KafkaCompressionNone KafkaCompression   = "none"
	KafkaCompressionLZ4  KafkaCompression   = "lz4"
	KafkaCompressionZstd KafkaCompression   = "zstd"
	KafkaAcksAll         KafkaAcks          = "all"
	KafkaAcksLeader      KafkaAcks          = "leader"
	KafkaAcksNone        KafkaAcks          = "none"
	KafkaMessageBatch    KafkaMessage       = "batch"
	KafkaMessageFlow     KafkaMessage       = "flow"
	KafkaSASLPlain       KafkaSASLMechanism = "plain"
	KafkaSASLScram512    KafkaSASLMechanism = "scram-sha-512"
)

// KafkaExporter writes flows to a Kafka topic (the agent's --kafka-* flags;
// docs/export.md). The operator also runs collectors that consume the topic
// (spec.collector), with the same brokers, topic, TLS and SASL settings.
type KafkaExporter struct {
	// (The brokers' shape is checked here; their hosts and ports, which a
	// regular expression would spell badly, by the operator.)

	// Brokers are the bootstrap brokers, each host:port (an IPv6 address in
	// brackets), e.g. kafka-0.kafka.kafka.svc:9092.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:XValidation:rule=`self.all(b, b.matches('^(\\[[0-9a-fA-F:.]+\\]|[^\\[\\]/:,\\s]+):[0-9]{1,5}$'))`,message=`each broker is host:port, e.g. kafka-0.kafka.kafka.svc:9092 or [fd00::1]:9092`
	// +listType=atomic
	// +required
	Brokers []string `json:"brokers"`

	// Topic is the Kafka topic the agents write to and the collectors read.
	// +kubebuilder:default=flowlens-flows
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=249
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9._-]+$`
	// +optional
	Topic string `json:"topic,omitempty"`

	// TLS connects to the brokers with TLS; tls: {} verifies them with the
	// image's system CAs. Unset means plaintext.
	// +optional
	TLS *ClientTLS `json:"tls,omitempty"`

	// SASL authenticates to the brokers. Unset means no SASL.
	// +optional
	SASL *KafkaSASL `json:"sasl,omitempty"`

	// Compression of the record batches: none, lz4 or zstd.
	// +kubebuilder:default=lz4
	// +optional
	Compression KafkaCompression `json:"compression,omitempty"`

	// Linger is how long the agent waits for more records before it sends a
	// batch to a partition, as a duration such as 50ms (0s to 1m).
	// +kubebuilder:default="50ms"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1m')",message="must be a duration from 0s to 1m"
	// +optional
	Linger *metav1.Duration `json:"linger,omitempty"`

	// MaxBatchBytes is the largest record batch the agent sends to one
	// partition, in bytes (1024 to 1073741824); the brokers' message.max.bytes
	// must allow it.
	// +kubebuilder:default=1048576
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=1073741824
	// +optional
	MaxBatchBytes int32 `json:"maxBatchBytes,omitempty"`

	// Acks is which replicas must have a record before the broker
	// acknowledges it: all (the in-sync replicas), leader or none.
	// +kubebuilder:default=all
	// +optional
	Acks KafkaAcks `json:"acks,omitempty"`

	// Message is what one record holds: batch (a FlowBatch of up to
	// BatchFlows flows) or flow (one Flow).
	// +kubebuilder:default=batch
	// +optional
	Message KafkaMessage `json:"message,omitempty"`

	// BatchFlows is the most flows in one batch record (message batch).
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	BatchFlows int32 `json:"batchFlows,omitempty"`
}

// KafkaSASL authenticates the agents and the collectors to the brokers with
// the username and password of a Secret.
type KafkaSASL struct {
	// Mechanism is plain (PLAIN: the password crosses the network, so use it
	// with TLS) or scram-sha-512 (SCRAM-SHA-512).
	// +required
	Mechanism KafkaSASLMechanism `json:"mechanism"`

	// SecretRef names a Secret with the keys username and password. The
	// password is mounted as a file, the username read into an environment
	// variable; the operator never reads the Secret.
	// +required
	SecretRef SecretRef `json:"secretRef"`
}

// OTLPProtocol is the OTLP transport: gRPC or HTTP (protobuf).
// +kubebuilder:validation:Enum=grpc;http
type OTLPProtocol string

// OTLPCompression is the compression of the OTLP requests.
// +kubebuilder:validation:Enum=none;gzip
type OTLPCompression string

// OTLPHeaderValue is the value of an OTLP header.
// +kubebuilder:validation:MaxLength=1024
type OTLPHeaderValue string

// The otlp exporter's settings.
const (
	OTLPGRPC            OTLPProtocol    = "grpc"
	OTLPHTTP            OTLPProtocol    = "http"
	OTLPCompressionNone OTLPCompression = "none"
	OTLPCompressionGzip OTLPCompression = "gzip"
)

// OTLPExporter sends flows as OpenTelemetry log records to an OTLP receiver
// (the agent's --otlp-* flags; docs/export.md).
// +kubebuilder:validation:XValidation:rule="!has(self.headers) || !has(self.headersSecretRef)",message="set headers or headersSecretRef, not both"
type OTLPExporter struct {
	// TargetHost is the receiver's DNS name or IP address, without a port
	// or scheme, e.g. otel-collector.monitoring.svc.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	TargetHost string `json:"targetHost"`

	// TargetPort is the receiver's port, typically 4317 (grpc) or 4318
	// (http).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +required
	TargetPort int32 `json:"targetPort"`

	// Protocol is grpc or http (OTLP/HTTP with protobuf).
	// +kubebuilder:default=grpc
	// +optional
	Protocol OTLPProtocol `json:"protocol,omitempty"`

	// TLS connects to the receiver with TLS; tls: {} verifies it with the
	// image's system CAs. Unset means plaintext.
	// +optional
	TLS *ClientTLS `json:"tls,omitempty"`

	// Headers are sent with every request (gRPC metadata or HTTP headers),
	// e.g. a tenant id. They are written in the agent's configuration
	// ConfigMap: put credentials in HeadersSecretRef instead.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Za-z0-9._-]{1,128}$'))",message="header names are 1 to 128 letters, digits, '.', '_' or '-'"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !self[k].contains(','))",message="header values cannot contain a comma: --otlp-headers is a comma-separated key=value list"
	// +optional
	Headers map[string]OTLPHeaderValue `json:"headers,omitempty"`

	// HeadersSecretRef names a Secret whose key headers holds the headers as
	// the agent's --otlp-headers takes them: key=value,key=value. It is read
	// into an environment variable of the agent; the operator never reads
	// it.
	// +optional
	HeadersSecretRef *SecretRef `json:"headersSecretRef,omitempty"`

	// Compression of the requests: none or gzip. Unset means the agent's
	// default.
	// +optional
	Compression OTLPCompression `json:"compression,omitempty"`

	// BatchFlows is the most flows (log records) in one request.
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	BatchFlows int32 `json:"batchFlows,omitempty"`
}

// ClientTLS is TLS from the agent (and, for Kafka, the collectors) to a
// server. Its Secrets, in spec.namespace, are mounted into the pods; the
// operator never reads them.
type ClientTLS struct {
	// CASecretRef is a key of a Secret holding the PEM CA bundle that
	// verifies the server's certificate. Unset means the system CAs.
	// +optional
	CASecretRef *SecretKeyRef `json:"caSecretRef,omitempty"`

	// ClientSecretRef names a kubernetes.io/tls Secret whose tls.crt and
	// tls.key are presented to the server (mutual TLS).
	// +optional
	ClientSecretRef *SecretRef `json:"clientSecretRef,omitempty"`
}

// IPFIXExporter sends flows as IPFIX messages (RFC 7011) to an IPFIX
// collector (the agent's --ipfix-* flags; docs/export.md).
// +kubebuilder:validation:XValidation:rule="!has(self.maxMessageSize) || (has(self.transport) && self.transport == 'tcp') || self.maxMessageSize <= 65507",fieldPath=".maxMessageSize",message="must be at most 65507 over udp (the largest UDP payload)"
type IPFIXExporter struct {
	// TargetHost is the collector's DNS name or IP address, without a port
	// or scheme, e.g. ipfix-collector.monitoring.svc.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	TargetHost string `json:"targetHost"`

	// TargetPort is the collector's IPFIX port, typically 4739.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +required
	TargetPort int32 `json:"targetPort"`

	// Transport is how messages reach the collector: udp or tcp.
	// +kubebuilder:default=udp
	// +optional
	Transport IPFIXTransport `json:"transport,omitempty"`

	// DomainID is the observation domain id of the exported messages, 0 to
	// 4294967295.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	// +optional
	DomainID *int64 `json:"domainId,omitempty"`

	// TemplateRefresh is how often the agent resends its templates over UDP
	// (they are also in the first message), as a duration such as 1m or 30s
	// (1s to 1h).
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="must be a duration from 1s to 1h"
	// +optional
	TemplateRefresh *metav1.Duration `json:"templateRefresh,omitempty"`

	// MaxMessageSize is the largest IPFIX message in bytes, filled with as
	// many flows as fit: 1024 to 65507 over udp (keep it under the path MTU
	// less 48 bytes), to 65535 over tcp. Unset: the agent's default, over
	// udp the path MTU to the target less 100 bytes (1400 for 1500), 65535
	// over tcp.
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	// +optional
	MaxMessageSize *int32 `json:"maxMessageSize,omitempty"`

	// EnterpriseNumber is the IANA Private Enterprise Number under which the
	// agent exports flowlens's own IPFIX elements, 1 to 4294967295. Unset:
	// the agent's default, 32473, IANA's number for documentation (RFC
	// 5612), a placeholder until flowlens registers its own.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +optional
	EnterpriseNumber *int64 `json:"enterpriseNumber,omitempty"`
}

// GRPCExporter sends flows to a flowlens collector over gRPC.
// +kubebuilder:validation:XValidation:rule="!(has(self.tls) && has(self.insecurePlaintext) && self.insecurePlaintext)",message="tls and insecurePlaintext exclude each other"
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

	// TLS secures the connection to the collector with Secrets of your
	// own. Unset means the certificates of spec.tls: the agent verifies the
	// collector with the CA bundle of the ConfigMap flowlens-ca. Either
	// way, the agent sends a ServiceAccount token (audience
	// flowlens-collector) with its flows, by which the collector knows its
	// node.
	// +optional
	TLS *ExporterTLS `json:"tls,omitempty"`

	// InsecurePlaintext sends the flows without TLS and without a token,
	// to a collector started with --insecure-plaintext: anyone on the path
	// reads them, and the collector cannot tell agents from other pods.
	// +optional
	InsecurePlaintext bool `json:"insecurePlaintext,omitempty"`
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

// MetricsTLS is the TLS of a metrics endpoint: the agents'
// (spec.agent.metricsTLS) or the Kafka collectors' (spec.collector.metricsTLS).
// The operator writes a Prometheus exporter-toolkit web configuration for it
// (key web-config.yml of the agent's ConfigMap, the agent's web_config_file;
// of the ConfigMap flowlens-collector-kafka, the collector's
// --web-config-file) and mounts the Secrets, in spec.namespace, into the
// pods; it never reads them. Both read the certificate and key again on
// every TLS handshake, so a renewed Secret is served without a restart.
type MetricsTLS struct {
	// ServerSecretRef names a kubernetes.io/tls Secret whose tls.crt (the
	// certificate and its chain) and tls.key every pod serves. The agents
	// are scraped at their nodes' addresses, the collectors at their pods':
	// give the certificate a DNS name and set it as serverName in the
	// scrape's TLS configuration.
	// +required
	ServerSecretRef SecretRef `json:"serverSecretRef"`

	// ClientCASecretRef is a key of a Secret holding the PEM CA bundle that
	// clients' certificates must chain to. Set, the pods require such a
	// certificate from every client (mutual TLS): the kubelet's probes have
	// none, so they then only check that the metrics port accepts TCP
	// connections (the agent listens once its BPF programs are loaded,
	// shortly before /readyz would answer 200; the collector as it starts).
	// Unset, no client certificate is asked for and the probes GET /healthz
	// and /readyz over HTTPS.
	// +optional
	ClientCASecretRef *SecretKeyRef `json:"clientCASecretRef,omitempty"`
}

// SecretRef names a Secret in the agent namespace.
type SecretRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.size() == 0 || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message=`not a Secret name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit`
	// +required
	Name string `json:"name"`
}

// SecretKeyRef selects one key of a Secret in the agent namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.size() == 0 || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message=`not a Secret name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit`
	// +required
	Name string `json:"name"`

	// Key in the Secret.
	// +kubebuilder:default="ca.crt"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-._a-zA-Z0-9]+$')`,message=`not a Secret key: letters, digits, '-', '_' and '.'`
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
	// ConditionCollectorReady is True when every Kafka collector runs the
	// current configuration and is ready. It is present only while a kafka
	// exporter makes the operator run the collectors. Ready does not
	// include it: Ready stays the agents' condition, which scripts wait for
	// (docs/operator.md, Status, says why).
	ConditionCollectorReady = "CollectorReady"

	ReasonAgentsReady        = "AgentsReady"        // Ready=True
	ReasonCollectorsReady    = "CollectorsReady"    // CollectorReady=True
	ReasonRollingOut         = "RollingOut"         // Ready or CollectorReady=False: pods are being updated
	ReasonAgentsNotReady     = "AgentsNotReady"     // Ready=False: some agents not ready
	ReasonCollectorsNotReady = "CollectorsNotReady" // CollectorReady=False: some collectors not ready
	ReasonNoNodes            = "NoNodes"            // Ready=False: no node matches
	ReasonMountFailed        = "MountFailed"        // Ready or CollectorReady=False: an agent (collector) pod cannot mount a volume, e.g. a missing Secret
	ReasonConfigFailed       = "ConfigFailed"       // Ready or CollectorReady=False: the kubelet cannot create an agent (collector) container, e.g. a missing Secret key in an env var
	ReasonInvalidSpec        = "InvalidSpec"        // Ready and CollectorReady=False, Degraded=True
	ReasonApplyFailed        = "ApplyFailed"        // Ready and CollectorReady=False, Degraded=True
	ReasonAsExpected         = "AsExpected"         // Degraded=False
)

// FlowCollectorStatus is the observed state of the agents and of the Kafka
// collectors.
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

	// DesiredCollectors is the number of Kafka collector pods that should
	// run (spec.collector.replicas with a kafka exporter, else 0).
	// +optional
	DesiredCollectors int32 `json:"desiredCollectors"`

	// ReadyCollectors is the number of ready Kafka collector pods.
	// +optional
	ReadyCollectors int32 `json:"readyCollectors"`

	// UpdatedCollectors is the number of Kafka collector pods that run the
	// current configuration.
	// +optional
	UpdatedCollectors int32 `json:"updatedCollectors"`

	// Namespace is where the agents run.
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Conditions are Ready and Degraded, and CollectorReady with a kafka
	// exporter.
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
// +kubebuilder:printcolumn:name="Collectors",type=string,JSONPath=`.status.conditions[?(@.type=="CollectorReady")].reason`
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

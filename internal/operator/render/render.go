// Package render turns a FlowCollector into the objects that run the flowlens
// agent: the agent's YAML configuration and server-side apply configurations
// for its namespace, ServiceAccount, Role, RoleBinding, ConfigMap, metrics
// Service and DaemonSet, and the default metrics web configuration
// (metricstls.go) in the ConfigMap flowlens-metrics-web-config; with a kafka exporter, the collector Deployment that
// consumes its topic and its ServiceAccount, RBAC, metrics Service and
// ConfigMap (collector.go); the agents' export ClusterRole, the
// NetworkPolicies (netpol.go) and the cert-manager Certificates of
// spec.tls.certManager (certmanager.go); and, when asked, the Grafana dashboard ConfigMaps. It is
// pure (no API calls), so every rule of what the operator deploys is
// unit-testable; the reconciler in package controller applies the result.
package render

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/feature/dns/dnsopt"
)

// Names of the objects the operator manages, in the agent namespace.
const (
	AgentName          = "flowlens-agent"         // DaemonSet, ServiceAccount, Role, RoleBinding, container
	ConfigMapName      = "flowlens-agent-config"  // the agent's YAML configuration
	MetricsServiceName = "flowlens-agent-metrics" // headless Service selecting the agents
	ConfigKey          = "agent.yaml"             // key of the configuration in the ConfigMap
)

// Paths inside the agent container.
const (
	ConfigDir   = "/etc/flowlens"
	ConfigPath  = ConfigDir + "/" + ConfigKey
	TLSCADir    = ConfigDir + "/tls/ca"
	TLSCAPath   = TLSCADir + "/ca.crt"
	TLSCertDir  = ConfigDir + "/tls/client"
	TLSCertPath = TLSCertDir + "/tls.crt"
	TLSKeyPath  = TLSCertDir + "/tls.key"

	// The kafka exporter's Secrets, in the agent and collector containers.
	KafkaTLSCADir        = ConfigDir + "/kafka/tls/ca"
	KafkaTLSCAPath       = KafkaTLSCADir + "/ca.crt"
	KafkaTLSCertDir      = ConfigDir + "/kafka/tls/client"
	KafkaTLSCertPath     = KafkaTLSCertDir + "/tls.crt"
	KafkaTLSKeyPath      = KafkaTLSCertDir + "/tls.key"
	KafkaSASLDir         = ConfigDir + "/kafka/sasl"
	KafkaSASLPasswordKey = "password" // key of the SASL Secret, and file name
	KafkaSASLUsernameKey = "username" // key of the SASL Secret
	KafkaPasswordPath    = KafkaSASLDir + "/" + KafkaSASLPasswordKey

	// The otlp exporter's Secrets, in the agent container.
	OTLPTLSCADir    = ConfigDir + "/otlp/tls/ca"
	OTLPTLSCAPath   = OTLPTLSCADir + "/ca.crt"
	OTLPTLSCertDir  = ConfigDir + "/otlp/tls/client"
	OTLPTLSCertPath = OTLPTLSCertDir + "/tls.crt"
	OTLPTLSKeyPath  = OTLPTLSCertDir + "/tls.key"
	OTLPHeadersKey  = "headers" // key of the headers Secret

	// The metrics endpoint's TLS (spec.agent.metricsTLS and
	// spec.collector.metricsTLS, metricstls.go), in the agent and collector
	// containers: the web configuration is a key of the ConfigMap mounted at
	// ConfigDir; the Secrets are mounted beneath.
	WebConfigKey        = "web-config.yml"
	WebConfigPath       = ConfigDir + "/" + WebConfigKey
	MetricsTLSDir       = ConfigDir + "/metrics/tls"
	MetricsTLSCertPath  = MetricsTLSDir + "/tls.crt"
	MetricsTLSKeyPath   = MetricsTLSDir + "/tls.key"
	MetricsClientCADir  = ConfigDir + "/metrics/client-ca"
	MetricsClientCAPath = MetricsClientCADir + "/ca.crt"
	// MetricsDefaultClientCAPath is the client CA of the default metrics
	// TLS: the bundle of the Secret certs.MetricsTLSName.
	MetricsDefaultClientCAPath = MetricsTLSDir + "/ca.crt"
	// MetricsWebConfigName is the ConfigMap holding DefaultWebConfig (key
	// WebConfigKey) for the chart's collector (charts/flowlens, mounted at
	// MetricsWebConfigDir); the operator's pods carry it in their own.
	MetricsWebConfigName = "flowlens-metrics-web-config"
	MetricsWebConfigDir  = ConfigDir + "/metrics/web"

	// The CA bundle (ConfigMap flowlens-ca, certs.BundleKey) that verifies
	// the collector, and the projected ServiceAccount token the agent sends
	// it (issue #27's contract: both paths are in docs/security.md).
	CABundleDir  = ConfigDir + "/ca"
	CABundlePath = CABundleDir + "/ca.crt"
	TokenDir     = "/var/run/secrets/flowlens"

	// HostIPEnv is the agent container's variable holding the node's
	// address (status.hostIP), which its --metrics-address binds.
	HostIPEnv = "HOST_IP"
	TokenPath = TokenDir + "/token"

	// NetnsDir is the one host path the agent mounts (read-only): it pins
	// nothing in the BPF filesystem and needs no tracefs (its tracepoints
	// are tp_btf, on kernels 6.2 and later), so neither /sys/fs/bpf nor
	// /sys/kernel/debug is mounted (issue #27).
	NetnsDir = config.DefaultNetnsDir
)

// The agents' token: the audience the collector's TokenReview asks for,
// and its lifetime (the kubelet renews it at 80 %, the agent re-reads the
// file).
const (
	TokenAudience          = "flowlens-collector"
	TokenExpirationSeconds = 3600
)

// Labels and annotations.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelPartOf    = "app.kubernetes.io/part-of"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelComponent = "app.kubernetes.io/component"
	// DashboardsComponent is the LabelComponent value of the Grafana
	// dashboard ConfigMaps, by which the operator finds the ones to delete.
	DashboardsComponent = "dashboards"
	// ManagedByValue marks every object the operator applies; the operator's
	// cache only holds objects with this label.
	ManagedByValue = "flowlens-operator"
	// ConfigHashAnnotation is set on the agent pod template to a hash of the
	// agent configuration, so a configuration change rolls the pods.
	ConfigHashAnnotation = "flowlens.io/config-hash"
	// PodSecurityEnforceLabel is set to "privileged" on a namespace the
	// operator creates: hostNetwork and hostPath volumes need that level.
	PodSecurityEnforceLabel = "pod-security.kubernetes.io/enforce"
)

// Defaults the operator applies when a field is unset. The API server's
// schema defaults normally fill the spec in first; these cover objects that
// bypassed it (and unit tests), and must match the kubebuilder markers. A
// field that is an agent option takes the agent's own default
// (internal/agent/config's Default*, a feature's in its options package such
// as dnsopt), written there once; the ones here are the operator's own.
const (
	DefaultNamespace         = "flowlens"
	DefaultPriorityClassName = "system-node-critical"
	DefaultCAKey             = "ca.crt"
	DefaultCollectorReplicas = 1
	DefaultIssuerKind        = "Issuer"
	DefaultIssuerGroup       = "cert-manager.io"
	// DefaultMetricsNamespace is the namespace whose pods may scrape the
	// collectors' metrics when spec.networkPolicy.metricsNamespaces is unset.
	DefaultMetricsNamespace = "monitoring"
)

// DefaultResources are the agent container's resources when spec.agent.resources
// is unset: a small request, and a memory limit with room for the default
// 100000-entry flow cache and export buffers.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("512Mi"),
		},
	}
}

// DefaultCollectorResources are the Kafka collector container's resources
// when spec.collector.resources is unset: those of
// manifests/flowlens-collector.yaml.
func DefaultCollectorResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("512Mi"),
		},
	}
}

// WithDefaults returns a copy of spec with every unset field set to its
// default. A nil list gets its default; an empty, non-nil list stays empty
// (it means "none").
func WithDefaults(spec v1alpha1.FlowCollectorSpec) v1alpha1.FlowCollectorSpec {
	s := *spec.DeepCopy()
	if s.Namespace == "" {
		s.Namespace = DefaultNamespace
	}
	a := &s.Agent
	if a.ImagePullPolicy == "" {
		a.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if a.PriorityClassName == "" {
		a.PriorityClassName = DefaultPriorityClassName
	}
	if a.Sampling == 0 {
		a.Sampling = config.DefaultSampling
	}
	if a.CacheActiveTimeout == nil {
		a.CacheActiveTimeout = &metav1.Duration{Duration: config.DefaultCacheActiveTimeout}
	}
	if a.CacheMaxFlows == 0 {
		a.CacheMaxFlows = config.DefaultCacheMaxFlows
	}
	if a.ExcludeInterfaces == nil {
		a.ExcludeInterfaces = []string{config.DefaultExcludeInterfaces}
	}
	if a.Netns == nil {
		a.Netns = []string{config.DefaultNetns}
	}
	if a.Features == nil {
		a.Features = slices.Clone(v1alpha1.DefaultFeatures)
	}
	if a.DNSPorts == nil {
		a.DNSPorts = []int32{dnsopt.DefaultPort}
	}
	if a.DNSTimeout == nil {
		a.DNSTimeout = &metav1.Duration{Duration: dnsopt.DefaultTimeout}
	}
	if a.Capture.Enable == nil {
		on := config.DefaultCapture
		a.Capture.Enable = &on
	}
	if a.Capture.MaxSnaplen == 0 {
		a.Capture.MaxSnaplen = config.DefaultCaptureMaxSnaplen
	}
	if a.Resources == nil {
		r := DefaultResources()
		a.Resources = &r
	}
	if a.LogLevel == "" {
		a.LogLevel = config.DefaultLogLevel
	}
	if a.MetricsPort == 0 {
		a.MetricsPort = config.DefaultMetricsPort
	}
	if a.MetricsTLS != nil {
		defaultCAKey(a.MetricsTLS.ClientCASecretRef)
	}
	if a.Tolerations == nil {
		a.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	if len(s.Exporters) == 0 {
		s.Exporters = []v1alpha1.Exporter{{Type: config.DefaultExport}}
	}
	for i := range s.Exporters {
		if x := s.Exporters[i].IPFIX; x != nil {
			if x.Transport == "" {
				x.Transport = config.DefaultIPFIXTransport
			}
			if x.DomainID == nil {
				id := int64(config.DefaultIPFIXDomainID)
				x.DomainID = &id
			}
			if x.TemplateRefresh == nil {
				x.TemplateRefresh = &metav1.Duration{Duration: config.DefaultIPFIXTemplateRefresh}
			}
		}
		if k := s.Exporters[i].Kafka; k != nil {
			kafkaDefaults(k)
		}
		if o := s.Exporters[i].OTLP; o != nil {
			if o.Protocol == "" {
				o.Protocol = config.DefaultOTLPProtocol
			}
			if o.BatchFlows == 0 {
				o.BatchFlows = config.DefaultOTLPBatchFlows
			}
			if o.TLS != nil {
				defaultCAKey(o.TLS.CASecretRef)
			}
		}
		g := s.Exporters[i].GRPC
		if g == nil {
			continue
		}
		if g.BatchSize == 0 {
			g.BatchSize = config.DefaultGRPCBatchSize
		}
		if g.TLS != nil {
			defaultCAKey(g.TLS.CASecretRef)
		}
	}
	c := &s.Collector
	if c.Replicas == 0 {
		c.Replicas = DefaultCollectorReplicas
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if c.Resources == nil {
		r := DefaultCollectorResources()
		c.Resources = &r
	}
	if c.MetricsTLS != nil {
		defaultCAKey(c.MetricsTLS.ClientCASecretRef)
	}
	if s.Dashboards != nil && s.Dashboards.Namespace == "" {
		s.Dashboards.Namespace = s.Namespace
	}
	if cm := s.TLS.CertManager; cm != nil {
		if cm.IssuerRef.Kind == "" {
			cm.IssuerRef.Kind = DefaultIssuerKind
		}
		if cm.IssuerRef.Group == "" {
			cm.IssuerRef.Group = DefaultIssuerGroup
		}
	}
	if s.NetworkPolicy.Enable == nil {
		on := true
		s.NetworkPolicy.Enable = &on
	}
	if s.NetworkPolicy.MetricsNamespaces == nil {
		s.NetworkPolicy.MetricsNamespaces = []string{DefaultMetricsNamespace}
	}
	return s
}

func kafkaDefaults(k *v1alpha1.KafkaExporter) {
	if k.Topic == "" {
		k.Topic = config.DefaultKafkaTopic
	}
	if k.Compression == "" {
		k.Compression = config.DefaultKafkaCompression
	}
	if k.Linger == nil {
		k.Linger = &metav1.Duration{Duration: config.DefaultKafkaLinger}
	}
	if k.MaxBatchBytes == 0 {
		k.MaxBatchBytes = config.DefaultKafkaMaxBatchBytes
	}
	if k.Acks == "" {
		k.Acks = config.DefaultKafkaAcks
	}
	if k.Message == "" {
		k.Message = config.DefaultKafkaMessage
	}
	if k.BatchFlows == 0 {
		k.BatchFlows = config.DefaultKafkaBatchFlows
	}
	if k.TLS != nil {
		defaultCAKey(k.TLS.CASecretRef)
	}
}

func defaultCAKey(ref *v1alpha1.SecretKeyRef) {
	if ref != nil && ref.Key == "" {
		ref.Key = DefaultCAKey
	}
}

// DashboardsNamespace returns the namespace of the Grafana dashboard
// ConfigMaps, or "" when the dashboards are not enabled. spec must be
// defaulted (WithDefaults).
func DashboardsNamespace(spec *v1alpha1.FlowCollectorSpec) string {
	if spec.Dashboards == nil || !spec.Dashboards.Enabled {
		return ""
	}
	if spec.Dashboards.Namespace == "" {
		return spec.Namespace
	}
	return spec.Dashboards.Namespace
}

// exporterOf returns spec's exporter of type t, or nil (the list holds at
// most one of each type: the CRD's list-map key).
func exporterOf(spec *v1alpha1.FlowCollectorSpec, t v1alpha1.ExporterType) *v1alpha1.Exporter {
	for i := range spec.Exporters {
		if spec.Exporters[i].Type == t {
			return &spec.Exporters[i]
		}
	}
	return nil
}

// GRPC returns the grpc exporter of spec, or nil.
func GRPC(spec *v1alpha1.FlowCollectorSpec) *v1alpha1.GRPCExporter {
	if e := exporterOf(spec, v1alpha1.ExporterGRPC); e != nil {
		return e.GRPC
	}
	return nil
}

// IPFIX returns the ipfix exporter of spec, or nil.
func IPFIX(spec *v1alpha1.FlowCollectorSpec) *v1alpha1.IPFIXExporter {
	if e := exporterOf(spec, v1alpha1.ExporterIPFIX); e != nil {
		return e.IPFIX
	}
	return nil
}

// Kafka returns the kafka exporter of spec, or nil.
func Kafka(spec *v1alpha1.FlowCollectorSpec) *v1alpha1.KafkaExporter {
	if e := exporterOf(spec, v1alpha1.ExporterKafka); e != nil {
		return e.Kafka
	}
	return nil
}

// OTLP returns the otlp exporter of spec, or nil.
func OTLP(spec *v1alpha1.FlowCollectorSpec) *v1alpha1.OTLPExporter {
	if e := exporterOf(spec, v1alpha1.ExporterOTLP); e != nil {
		return e.OTLP
	}
	return nil
}

// NeedsSetns reports whether the agent watches namespaces other than the
// node's, and so must enter them (setns needs CAP_SYS_ADMIN).
func NeedsSetns(spec *v1alpha1.FlowCollectorSpec) bool {
	for _, n := range spec.Agent.Netns {
		if n != "host" {
			return true
		}
	}
	return false
}

// Hash returns a short, stable hash of data, for the config hash annotation.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:16]
}

package render

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
)

// agentConfig is the agent's YAML configuration file (the keys of the agent's
// --config file, see internal/agent/config). Fields are written in this order; lists are
// always written, even empty, because an empty list means "none" to the agent
// while a missing key would mean the agent's default.
type agentConfig struct {
	Interfaces         []string `yaml:"interfaces"`
	ExcludeInterfaces  []string `yaml:"exclude_interfaces"`
	Netns              []string `yaml:"netns"`
	NetnsDir           string   `yaml:"netns_dir"`
	CacheActiveTimeout string   `yaml:"cache_active_timeout"`
	CacheMaxFlows      int32    `yaml:"cache_max_flows"`
	// Written only when set, so that the configuration (and its hash) of
	// every other FlowCollector stays as it was before it existed.
	OverlayOuterFlows bool     `yaml:"overlay_outer_flows,omitempty"`
	Sampling          int32    `yaml:"sampling"`
	Export            []string `yaml:"export"`
	Target            string   `yaml:"target,omitempty"`
	GRPCBatchSize     int32    `yaml:"grpc_batch_size,omitempty"`
	// The grpc exporter's TLS and token: TLS with the CA bundle of
	// ConfigMap flowlens-ca (or the Secrets of spec.exporters[].grpc.tls)
	// and the projected ServiceAccount token; insecure_plaintext only when
	// the spec says so (grpc.insecurePlaintext).
	TLS               bool     `yaml:"tls,omitempty"`
	TLSCA             string   `yaml:"tls_ca,omitempty"`
	TLSCert           string   `yaml:"tls_cert,omitempty"`
	TLSKey            string   `yaml:"tls_key,omitempty"`
	TokenFile         string   `yaml:"token_file,omitempty"`
	InsecurePlaintext bool     `yaml:"insecure_plaintext,omitempty"`
	Features          []string `yaml:"features"`
	// No metrics_address: the DaemonSet passes --metrics-address with the
	// node's address, which only the kubelet knows (objects.go).
	// Written unless the metrics are plain HTTP (spec.metricsPlaintext).
	WebConfigFile string `yaml:"web_config_file,omitempty"`
	LogLevel      string `yaml:"log_level"`

	// The filter keys are written only when spec.agent.flowFilter sets them: no
	// key and no rules mean the same to the agent, and leaving them out keeps
	// the configuration of a FlowCollector without filters unchanged (no
	// roll of every agent when the operator is upgraded).
	FilterDefault string       `yaml:"filter_default,omitempty"`
	FilterRules   []filterRule `yaml:"filter_rules,omitempty"`

	// The dns keys are written only when the dns feature is enabled: the
	// agent uses them for nothing else, and leaving them out keeps the
	// configuration (and so its hash) of every other FlowCollector as it
	// was before they existed.
	DNSPorts   []int32 `yaml:"dns_ports,omitempty"`
	DNSTimeout string  `yaml:"dns_timeout,omitempty"`

	// The ipfix keys are written only with the ipfix exporter, so that the
	// configuration (and its hash) of every other FlowCollector stays as it
	// was before they existed. The domain id is a pointer: 0 is a value.
	IPFIXTarget          string  `yaml:"ipfix_target,omitempty"`
	IPFIXTransport       string  `yaml:"ipfix_transport,omitempty"`
	IPFIXDomainID        *uint32 `yaml:"ipfix_domain_id,omitempty"`
	IPFIXTemplateRefresh string  `yaml:"ipfix_template_refresh,omitempty"`

	// The kafka and otlp keys, likewise, only with their exporter. The
	// brokers are one comma-separated string, which the agent takes whether
	// its option is a list or a plain string. The SASL username and the OTLP
	// headers of a Secret are not here: the DaemonSet sets them as
	// environment variables from their Secrets (secrets.go).
	KafkaBrokers          string `yaml:"kafka_brokers,omitempty"`
	KafkaTopic            string `yaml:"kafka_topic,omitempty"`
	KafkaTLS              bool   `yaml:"kafka_tls,omitempty"`
	KafkaTLSCA            string `yaml:"kafka_tls_ca,omitempty"`
	KafkaTLSCert          string `yaml:"kafka_tls_cert,omitempty"`
	KafkaTLSKey           string `yaml:"kafka_tls_key,omitempty"`
	KafkaSASLMechanism    string `yaml:"kafka_sasl_mechanism,omitempty"`
	KafkaSASLPasswordFile string `yaml:"kafka_sasl_password_file,omitempty"`
	KafkaCompression      string `yaml:"kafka_compression,omitempty"`
	KafkaLinger           string `yaml:"kafka_linger,omitempty"`
	KafkaMaxBatchBytes    int32  `yaml:"kafka_max_batch_bytes,omitempty"`
	KafkaAcks             string `yaml:"kafka_acks,omitempty"`
	KafkaMessage          string `yaml:"kafka_message,omitempty"`
	KafkaBatchFlows       int32  `yaml:"kafka_batch_flows,omitempty"`

	OTLPEndpoint    string `yaml:"otlp_endpoint,omitempty"`
	OTLPProtocol    string `yaml:"otlp_protocol,omitempty"`
	OTLPTLS         bool   `yaml:"otlp_tls,omitempty"`
	OTLPTLSCA       string `yaml:"otlp_tls_ca,omitempty"`
	OTLPTLSCert     string `yaml:"otlp_tls_cert,omitempty"`
	OTLPTLSKey      string `yaml:"otlp_tls_key,omitempty"`
	OTLPHeaders     string `yaml:"otlp_headers,omitempty"`
	OTLPCompression string `yaml:"otlp_compression,omitempty"`
	OTLPBatchFlows  int32  `yaml:"otlp_batch_flows,omitempty"`
	// Written only when set in the FlowCollector: the agent's defaults
	// apply otherwise.
	IPFIXMaxMessageSize   int32  `yaml:"ipfix_max_message_size,omitempty"`
	IPFIXEnterpriseNumber uint32 `yaml:"ipfix_enterprise_number,omitempty"`

	// spec.agent.capture (--capture, --capture-max-snaplen), written only
	// where it differs from the agent's default (the same value, so the
	// agent does the same), so that the configuration (and its hash) of a
	// FlowCollector that leaves capture alone stays as it was before the
	// keys existed: no roll of every agent when the operator is upgraded.
	Capture           *bool `yaml:"capture,omitempty"`
	CaptureMaxSnaplen int32 `yaml:"capture_max_snaplen,omitempty"`
}

// filterRule is one entry of the agent's filter_rules: the fields of a
// FlowFilterRule under the agent's snake_case keys, unset ones left out.
// Ports and protocol are always strings, however the spec wrote them.
type filterRule struct {
	Name             string   `yaml:"name,omitempty"`
	Action           string   `yaml:"action"`
	CIDR             string   `yaml:"cidr,omitempty"`
	PeerCIDR         string   `yaml:"peer_cidr,omitempty"`
	Direction        string   `yaml:"direction,omitempty"`
	Protocol         string   `yaml:"protocol,omitempty"`
	Ports            string   `yaml:"ports,omitempty"`
	SourcePorts      string   `yaml:"source_ports,omitempty"`
	DestinationPorts string   `yaml:"destination_ports,omitempty"`
	ICMPType         *int32   `yaml:"icmp_type,omitempty"` // a pointer: type 0 (echo reply) is a value
	ICMPCode         *int32   `yaml:"icmp_code,omitempty"`
	TCPFlags         []string `yaml:"tcp_flags,omitempty"`
	Drops            bool     `yaml:"drops,omitempty"`
	Interfaces       []string `yaml:"interfaces,omitempty"`
	Sampling         int32    `yaml:"sampling,omitempty"`
}

// AgentConfig renders the agent's YAML configuration from a defaulted spec
// (see WithDefaults). The node name is not in it: the agent reads NODE_NAME,
// which the DaemonSet sets from spec.nodeName.
func AgentConfig(spec *v1alpha1.FlowCollectorSpec) ([]byte, error) {
	c := agentConfig{
		Interfaces:         nonNil(spec.Agent.Interfaces),
		ExcludeInterfaces:  nonNil(spec.Agent.ExcludeInterfaces),
		Netns:              nonNil(spec.Agent.Netns),
		NetnsDir:           NetnsDir,
		CacheActiveTimeout: spec.Agent.CacheActiveTimeout.Duration.String(),
		CacheMaxFlows:      spec.Agent.CacheMaxFlows,
		OverlayOuterFlows:  spec.Agent.OverlayOuterFlows,
		Sampling:           spec.Agent.Sampling,
		Export:             []string{},
		Features:           []string{},
		LogLevel:           string(spec.Agent.LogLevel),
	}
	if metricsHTTPS(spec.Agent.MetricsTLS, spec.MetricsPlaintext) {
		c.WebConfigFile = WebConfigPath
	}
	if f := spec.Agent.FlowFilter; f != nil {
		c.FilterDefault = string(f.Default)
		c.FilterRules = agentFilterRules(f.Rules)
	}
	for _, f := range spec.Agent.Features {
		c.Features = append(c.Features, string(f))
		if f == v1alpha1.FeatureDNS {
			c.DNSPorts = spec.Agent.DNSPorts
			c.DNSTimeout = spec.Agent.DNSTimeout.Duration.String()
		}
	}
	for _, e := range spec.Exporters {
		c.Export = append(c.Export, string(e.Type))
	}
	if g := GRPC(spec); g != nil {
		c.Target = net.JoinHostPort(g.TargetHost, strconv.Itoa(int(g.TargetPort)))
		c.GRPCBatchSize = g.BatchSize
		switch {
		case g.InsecurePlaintext:
			c.InsecurePlaintext = true // and no token: it would travel in clear
		case g.TLS != nil:
			c.TLS, c.TokenFile = true, TokenPath
			if g.TLS.CASecretRef != nil {
				c.TLSCA = TLSCAPath
			}
			if g.TLS.ClientSecretRef != nil {
				c.TLSCert, c.TLSKey = TLSCertPath, TLSKeyPath
			}
		default:
			c.TLS, c.TLSCA, c.TokenFile = true, CABundlePath, TokenPath
		}
	}
	if x := IPFIX(spec); x != nil {
		c.IPFIXTarget = net.JoinHostPort(x.TargetHost, strconv.Itoa(int(x.TargetPort)))
		c.IPFIXTransport = string(x.Transport)
		id := uint32(*x.DomainID) // the schema bounds it to 0..4294967295
		c.IPFIXDomainID = &id
		c.IPFIXTemplateRefresh = x.TemplateRefresh.Duration.String()
		if x.MaxMessageSize != nil {
			c.IPFIXMaxMessageSize = *x.MaxMessageSize
		}
		if x.EnterpriseNumber != nil {
			c.IPFIXEnterpriseNumber = uint32(*x.EnterpriseNumber) // the schema bounds it to 1..4294967295
		}
	}
	if k := Kafka(spec); k != nil {
		c.KafkaBrokers = strings.Join(k.Brokers, ",")
		c.KafkaTopic = k.Topic
		c.KafkaTLS, c.KafkaTLSCA, c.KafkaTLSCert, c.KafkaTLSKey = tlsPaths(k.TLS, KafkaTLSCAPath, KafkaTLSCertPath, KafkaTLSKeyPath)
		if k.SASL != nil {
			c.KafkaSASLMechanism = string(k.SASL.Mechanism)
			c.KafkaSASLPasswordFile = KafkaPasswordPath
		}
		c.KafkaCompression = string(k.Compression)
		c.KafkaLinger = k.Linger.Duration.String()
		c.KafkaMaxBatchBytes = k.MaxBatchBytes
		c.KafkaAcks = string(k.Acks)
		c.KafkaMessage = string(k.Message)
		c.KafkaBatchFlows = k.BatchFlows
	}
	if o := OTLP(spec); o != nil {
		c.OTLPEndpoint = net.JoinHostPort(o.TargetHost, strconv.Itoa(int(o.TargetPort)))
		c.OTLPProtocol = string(o.Protocol)
		c.OTLPTLS, c.OTLPTLSCA, c.OTLPTLSCert, c.OTLPTLSKey = tlsPaths(o.TLS, OTLPTLSCAPath, OTLPTLSCertPath, OTLPTLSKeyPath)
		c.OTLPHeaders = otlpHeaders(o.Headers)
		c.OTLPCompression = string(o.Compression)
		c.OTLPBatchFlows = o.BatchFlows
	}
	if capt := spec.Agent.Capture; *capt.Enable != config.DefaultCapture {
		c.Capture = capt.Enable
	}
	if n := spec.Agent.Capture.MaxSnaplen; n != config.DefaultCaptureMaxSnaplen {
		c.CaptureMaxSnaplen = n
	}
	out, err := yaml.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("rendering the agent configuration: %w", err)
	}
	return append([]byte("# Generated by the flowlens operator from the FlowCollector: do not edit.\n"), out...), nil
}

// tlsPaths returns the agent's --*-tls, --*-tls-ca, --*-tls-cert and
// --*-tls-key values for t: where the pod mounts its Secrets.
func tlsPaths(t *v1alpha1.ClientTLS, caPath, certPath, keyPath string) (on bool, ca, cert, key string) {
	if t == nil {
		return false, "", "", ""
	}
	if t.CASecretRef != nil {
		ca = caPath
	}
	if t.ClientSecretRef != nil {
		cert, key = certPath, keyPath
	}
	return true, ca, cert, key
}

// otlpHeaders writes headers as --otlp-headers takes them, key=value pairs
// joined by commas, sorted by key so the configuration hash is stable.
func otlpHeaders(h map[string]v1alpha1.OTLPHeaderValue) string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		pairs = append(pairs, k+"="+string(h[k]))
	}
	return strings.Join(pairs, ",")
}

// agentFilterRules returns rules as the agent's filter_rules; nil for none.
func agentFilterRules(rules []v1alpha1.FlowFilterRule) []filterRule {
	var out []filterRule
	for i := range rules {
		out = append(out, agentFilterRule(&rules[i]))
	}
	return out
}

func agentFilterRule(r *v1alpha1.FlowFilterRule) filterRule {
	out := filterRule{
		Name:             r.Name,
		Action:           string(r.Action),
		CIDR:             r.CIDR,
		PeerCIDR:         r.PeerCIDR,
		Direction:        string(r.Direction),
		Protocol:         intOrString(r.Protocol),
		Ports:            intOrString(r.Ports),
		SourcePorts:      intOrString(r.SourcePorts),
		DestinationPorts: intOrString(r.DestinationPorts),
		ICMPType:         r.ICMPType,
		ICMPCode:         r.ICMPCode,
		Drops:            r.Drops,
		Interfaces:       r.Interfaces,
		Sampling:         r.Sampling,
	}
	for _, f := range r.TCPFlags {
		out.TCPFlags = append(out.TCPFlags, string(f))
	}
	return out
}

// intOrString returns v as a string ("443" for the number 443), "" if unset.
func intOrString(v *intstr.IntOrString) string {
	if v == nil {
		return ""
	}
	return v.String()
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

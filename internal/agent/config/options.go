package config

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/flowlens/flowlens/internal/shared/cliconf"
)

// option is one setting. Its flag name is the only spelling written down; the
// environment variable and YAML key are derived from it (see package
// cliconf, which spec turns the table into).
type option struct {
	name  string // flag name, e.g. "cache-active-timeout"
	arg   string // placeholder for the value in usage
	def   string // default, parsed like a user's value so usage cannot lie
	usage string
	// Exactly one of set and setList is non-nil. List options get their
	// entries already split so that a YAML sequence needs no comma splitting.
	set     func(c *Config, s string) error
	setList func(c *Config, items []string) error
	// setNode, if set, takes a YAML list or mapping from the file (see
	// cliconf.Option.SetNode).
	setNode func(c *Config, n *yaml.Node) error
	// bool lets the flag be given without a value (--name is --name=true).
	bool bool
}

// options is in the order usage lists them and Validate checks them.
var options = slices.Concat([]*option{
	{name: "interfaces", arg: "list", def: "",
		usage:   "interfaces to watch: names and /regex/ patterns; empty means all",
		setList: func(c *Config, v []string) error { c.Interfaces = v; return nil }},
	{name: "exclude-interfaces", arg: "list", def: "lo",
		usage:   "interfaces never to watch, same syntax; wins over --interfaces",
		setList: func(c *Config, v []string) error { c.ExcludeInterfaces = v; return nil }},
	{name: "netns", arg: "list", def: "host",
		usage:   `namespaces to watch: "host" (the agent's own), "all" (host and every named namespace) or names under --netns-dir`,
		setList: func(c *Config, v []string) error { c.Netns = v; return nil }},
	{name: "netns-dir", arg: "dir", def: "/var/run/netns",
		usage: "directory where named network namespaces live",
		set:   func(c *Config, s string) error { c.NetnsDir = s; return nil }},
	{name: "cache-active-timeout", arg: "duration", def: "5s",
		usage: "how often flows are evicted from the kernel (100ms to 1h)",
		set:   setDuration(func(c *Config) *time.Duration { return &c.CacheActiveTimeout })},
	{name: "cache-max-flows", arg: "n", def: "100000",
		usage: "size of the in-kernel flow map (1 to 10000000)",
		set:   setInt(func(c *Config) *int { return &c.CacheMaxFlows })},
	{name: "sampling", arg: "n", def: "1",
		usage: "account 1 packet in n; 1 means every packet",
		set:   setSampling},
	{name: "filter-rules", arg: "file", def: "",
		usage:   "YAML or JSON file listing flow filter rules (docs/filters.md); the config file may list them inline under filter_rules instead",
		set:     setFilterRulesFile,
		setNode: setFilterRulesInline},
	{name: "filter-default", arg: "accept|reject", def: "reject",
		usage: "what happens to packets no filter rule matches; without rules every packet is kept, whatever this says",
		set:   setFilterDefault},
	{name: "export", arg: "list", def: "stdout",
		usage:   "exporters: stdout, grpc, ipfix, kafka, otlp",
		setList: func(c *Config, v []string) error { c.Export = v; return nil }},
	{name: "target", arg: "host:port", def: "",
		usage: "collector address for the grpc exporter; required with --export grpc",
		set:   func(c *Config, s string) error { c.Target = s; return nil }},
	{name: "grpc-batch-size", arg: "n", def: "1000",
		usage: "flows per grpc message (1 to 100000)",
		set:   setInt(func(c *Config) *int { return &c.GRPCBatchSize })},
	{name: "ipfix-target", arg: "host:port", def: "",
		usage: "IPFIX collector address; required with --export ipfix",
		set:   func(c *Config, s string) error { c.IPFIXTarget = s; return nil }},
	{name: "ipfix-transport", arg: "udp|tcp", def: "udp",
		usage: "transport to the IPFIX collector",
		set:   func(c *Config, s string) error { c.IPFIXTransport = s; return nil }},
	{name: "ipfix-domain-id", arg: "n", def: "1",
		usage: "IPFIX observation domain id of the exported messages (0 to 4294967295)",
		set:   setIPFIXDomainID},
	{name: "ipfix-template-refresh", arg: "duration", def: "1m",
		usage: "how often the IPFIX templates are resent over UDP (1s to 1h); they are also sent in the first message",
		set:   setDuration(func(c *Config) *time.Duration { return &c.IPFIXTemplateRefresh })},
	{name: "otlp-endpoint", arg: "host:port", def: "",
		usage: "OTLP receiver address (e.g. an OpenTelemetry Collector); required with --export otlp",
		set:   func(c *Config, s string) error { c.OTLPEndpoint = s; return nil }},
	{name: "otlp-protocol", arg: "grpc|http", def: "grpc",
		usage: "OTLP transport: grpc (LogsService/Export) or http (protobuf POST to /v1/logs)",
		set:   func(c *Config, s string) error { c.OTLPProtocol = s; return nil }},
	{name: "otlp-tls", arg: "bool", def: "false", bool: true,
		usage: "use TLS to the OTLP receiver (implied by --otlp-tls-ca, --otlp-tls-cert, --otlp-tls-key); without --otlp-tls-ca the system's roots verify it",
		set:   cliconf.Bool(func(c *Config) *bool { return &c.OTLPTLS })},
	{name: "otlp-tls-ca", arg: "file", def: "",
		usage: "CA certificate to verify the OTLP receiver",
		set:   func(c *Config, s string) error { c.OTLPTLSCA = s; return nil }},
	{name: "otlp-tls-cert", arg: "file", def: "",
		usage: "client certificate for the OTLP receiver; needs --otlp-tls-key",
		set:   func(c *Config, s string) error { c.OTLPTLSCert = s; return nil }},
	{name: "otlp-tls-key", arg: "file", def: "",
		usage: "client key for the OTLP receiver; needs --otlp-tls-cert",
		set:   func(c *Config, s string) error { c.OTLPTLSKey = s; return nil }},
	{name: "otlp-headers", arg: "list", def: "",
		usage:   "key=value headers sent with every OTLP request (gRPC metadata or HTTP headers), e.g. authorization=Bearer x; the config file may give them as a mapping",
		setList: setOTLPHeaders,
		setNode: setOTLPHeadersNode},
	{name: "otlp-compression", arg: "none|gzip", def: "none",
		usage: "compression of the OTLP requests",
		set:   func(c *Config, s string) error { c.OTLPCompression = s; return nil }},
	{name: "otlp-batch-flows", arg: "n", def: "1000",
		usage: "most flows (log records) per OTLP request (1 to 100000)",
		set:   setInt(func(c *Config) *int { return &c.OTLPBatchFlows })},
	{name: "ipfix-max-message-size", arg: "bytes", def: "0",
		usage: "largest IPFIX message, filled with as many flows as fit: 1024 to 65507 over UDP (keep it under the path MTU less 48 bytes of IPv6 and UDP headers), to 65535 over TCP; 0 = over UDP the path MTU to the target less 100 bytes (1400 for 1500), 65535 over TCP",
		set:   setInt(func(c *Config) *int { return &c.IPFIXMaxMessageSize })},
	{name: "ipfix-enterprise-number", arg: "pen", def: "32473",
		usage: "IANA Private Enterprise Number of flowlens's own IPFIX elements (1 to 4294967295); the default 32473 is IANA's number for documentation (RFC 5612), to be replaced by flowlens's registered number once there is one, or set to your site's",
		set:   setIPFIXEnterpriseNumber},
}, kafkaOptions, []*option{
	{name: "export-buffer", arg: "n", def: "0",
		usage: "batches queued per exporter; when full, eviction waits for room (up to half the eviction period per exporter), then the oldest are dropped, counted (0 to 100000; 0 = 8)",
		set:   setInt(func(c *Config) *int { return &c.ExportBuffer })},
	{name: "tls-ca", arg: "file", def: "",
		usage: "CA certificate to verify the grpc collector",
		set:   func(c *Config, s string) error { c.TLSCA = s; return nil }},
	{name: "tls-cert", arg: "file", def: "",
		usage: "client certificate for the grpc collector; needs --tls-key",
		set:   func(c *Config, s string) error { c.TLSCert = s; return nil }},
	{name: "tls-key", arg: "file", def: "",
		usage: "client key for the grpc collector; needs --tls-cert",
		set:   func(c *Config, s string) error { c.TLSKey = s; return nil }},
	{name: "features", arg: "list", def: "drops,rtt,retransmits",
		usage:   `optional measurements: drops, rtt, retransmits, xlat (conntrack NAT translation), tls (TLS handshakes, QUIC), dns (DNS ids, codes, names, latency); "none" or empty for none`,
		setList: setFeatures},
	{name: "dns-ports", arg: "list", def: "53",
		usage:   "ports the dns feature reads DNS messages on, UDP and TCP (1 to 4 ports)",
		setList: setDNSPorts},
	{name: "dns-timeout", arg: "duration", def: "5s",
		usage: "how long a DNS query may go unanswered before its flow says dns_timeout (100ms to 1m)",
		set:   setDuration(func(c *Config) *time.Duration { return &c.DNSTimeout })},
	{name: "metrics-address", arg: "host:port", def: ":9400",
		usage: `address to serve Prometheus metrics on; "" disables`,
		set:   func(c *Config, s string) error { c.MetricsAddress = s; return nil }},
	{name: "web-config-file", arg: "file", def: "",
		usage: "Prometheus exporter-toolkit web configuration file: serve the metrics over TLS, optionally requiring client certificates (docs/metrics-agent.md); empty for plain HTTP",
		set:   func(c *Config, s string) error { c.WebConfigFile = s; return nil }},
	{name: "bpf-stats", arg: "on|off", def: "on",
		usage: "keep the kernel's BPF run-time statistics on while the agent runs (flowlens_agent_bpf_program_* metrics); off saves every BPF program on the node two clock reads per run",
		set:   setOnOff(func(c *Config) *bool { return &c.BPFStats })},
	{name: "node-name", arg: "name", def: "",
		usage: "name of this node in exported flows (default $NODE_NAME, else the hostname)",
		set:   func(c *Config, s string) error { c.NodeName = s; return nil }},
	{name: "log-level", arg: "level", def: "info",
		usage: "debug, info, warn or error",
		set:   setLogLevel},
})

func setDuration(field func(*Config) *time.Duration) func(*Config, string) error {
	return cliconf.Duration(field)
}

func setInt(field func(*Config) *int) func(*Config, string) error { return cliconf.Int(field) }

func setBool(field func(*Config) *bool) func(*Config, string) error { return cliconf.Bool(field) }

func setOnOff(field func(*Config) *bool) func(*Config, string) error { return cliconf.OnOff(field) }

func setSampling(c *Config, s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return errors.New("must be an integer from 1 to 4294967295")
	}
	c.Sampling = uint32(n)
	return nil
}

func setIPFIXEnterpriseNumber(c *Config, s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return errors.New("must be an integer from 1 to 4294967295")
	}
	c.IPFIXEnterpriseNumber = uint32(n)
	return nil
}

func setIPFIXDomainID(c *Config, s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return errors.New("must be an integer from 0 to 4294967295")
	}
	c.IPFIXDomainID = uint32(n)
	return nil
}

var setLogLevel = cliconf.Level(func(c *Config) *slog.Level { return &c.LogLevel })

const featureNames = "drops, rtt, retransmits, xlat, tls, dns"

func setFeatures(c *Config, items []string) error {
	var f Features
	for _, it := range items {
		switch it {
		case "drops":
			f.Drops = true
		case "rtt":
			f.RTT = true
		case "retransmits":
			f.Retransmits = true
		case "xlat":
			f.Xlat = true
		case "tls":
			f.TLS = true
		case "dns":
			f.DNS = true
		case "none":
			if len(items) > 1 {
				return errors.New(`"none" cannot be combined with features`)
			}
		default:
			return fmt.Errorf("unknown feature %q: must be one of %s, or none", it, featureNames)
		}
	}
	c.Features = f
	return nil
}

func setDNSPorts(c *Config, items []string) error {
	if len(items) < 1 || len(items) > 4 {
		return errors.New("must be 1 to 4 ports")
	}
	var ports []uint16
	for _, it := range items {
		n, err := strconv.ParseUint(it, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("port %q: must be a number from 1 to 65535", it)
		}
		ports = append(ports, uint16(n))
	}
	c.DNSPorts = ports
	return nil
}

// setOTLPHeaders parses key=value items: the key a header name, the value
// anything (it may hold "=", as base64 tokens do).
func setOTLPHeaders(c *Config, items []string) error {
	h := map[string]string{}
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		k = strings.TrimSpace(k)
		// The errors show the key only: a value may be a secret.
		if !ok || k == "" {
			return cliconf.ItemError(k, errors.New("must be key=value"))
		}
		if !validHeaderName(k) {
			return cliconf.ItemError(k, errors.New("not a header name (letters, digits, - _ .)"))
		}
		h[strings.ToLower(k)] = strings.TrimSpace(v)
	}
	if len(h) == 0 {
		h = nil
	}
	c.OTLPHeaders = h
	return nil
}

// setOTLPHeadersNode takes otlp_headers from the config file as a YAML
// mapping (header: value), or as a list of key=value like the flag.
func setOTLPHeadersNode(c *Config, n *yaml.Node) error {
	var items []string
	for i := 0; i < len(n.Content); i++ {
		e := n.Content[i]
		item := e.Value
		if n.Kind == yaml.MappingNode {
			i++
			v := n.Content[i]
			if e.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
				return cliconf.AtLine(e.Line, fmt.Errorf("invalid otlp_headers: %q: must be a plain value", e.Value))
			}
			item = e.Value + "=" + v.Value
		} else if e.Kind != yaml.ScalarNode {
			return cliconf.AtLine(e.Line, errors.New("invalid otlp_headers: list entries must be plain values"))
		}
		if err := setOTLPHeaders(c, []string{item}); err != nil {
			return cliconf.AtLine(e.Line, cliconf.Invalid("otlp_headers", "", err))
		}
		items = append(items, item)
	}
	return setOTLPHeaders(c, items)
}

// validHeaderName accepts what both gRPC metadata keys and HTTP header
// names allow (gRPC keys are lower case: headers are case-insensitive).
func validHeaderName(k string) bool {
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// splitList splits a comma-separated list: see cliconf.SplitList.
func splitList(s string) []string { return cliconf.SplitList(s) }

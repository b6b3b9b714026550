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

// options is the agent's option table, grouped by the component each
// configures, in the order the help lists them.
var options = slices.Concat(
	cliconf.InSection("Interfaces and namespaces", []*cliconf.Option[Config]{
		{Name: "interfaces", Arg: "list", Default: "",
			Usage:   "interfaces to watch: names and /regex/ patterns; empty means all",
			SetList: func(c *Config, v []string) error { c.Interfaces = v; return nil }},
		{Name: "exclude-interfaces", Arg: "list", Default: DefaultExcludeInterfaces,
			Usage:   "interfaces never to watch, same syntax; wins over --interfaces",
			SetList: func(c *Config, v []string) error { c.ExcludeInterfaces = v; return nil }},
		{Name: "netns", Arg: "list", Default: DefaultNetns,
			Usage:   `namespaces to watch: "host" (the agent's own), "all" (host and every named namespace) or names under --netns-dir`,
			SetList: func(c *Config, v []string) error { c.Netns = v; return nil }},
		{Name: "tc-attach", Arg: "auto|clsact", Default: "auto",
			Usage: "how the TC programs attach: auto (tcx links where the kernel has them, else a clsact qdisc and cls_bpf filters) or clsact (always, e.g. beside tools that order their own clsact filters)",
			Set:   setTCAttach},
		{Name: "netns-dir", Arg: "dir", Default: DefaultNetnsDir,
			Usage: "directory where named network namespaces live",
			Set:   func(c *Config, s string) error { c.NetnsDir = s; return nil }},
	}),
	cliconf.InSection("Flow cache", []*cliconf.Option[Config]{
		{Name: "cache-active-timeout", Arg: "duration", Default: DefaultCacheActiveTimeout.String(),
			Usage: "how often flows are evicted from the kernel (100ms to 1h)",
			Set:   cliconf.Duration(func(c *Config) *time.Duration { return &c.CacheActiveTimeout })},
		{Name: "cache-max-flows", Arg: "n", Default: itoa(DefaultCacheMaxFlows),
			Usage: "size of the in-kernel flow map (1 to 10000000)",
			Set:   cliconf.Int(func(c *Config) *int { return &c.CacheMaxFlows })},
		{Name: "sampling", Arg: "n", Default: itoa(DefaultSampling),
			Usage: "account 1 packet in n; 1 means every packet",
			Set:   setSampling},
		{Name: "overlay-outer-flows", Arg: "bool", Default: "false", Bool: true,
			Usage: "also export the node-to-node tunnel flows (VXLAN, Geneve, IP-in-IP) as records of their own, marked overlay_outer: their packets are counted in their inner flows too, so sums over flows skip them (docs/design/counting.md, Overlays)",
			Set:   cliconf.Bool(func(c *Config) *bool { return &c.OverlayOuterFlows })},
	}),
	cliconf.InSection("Flow filter (docs/filters.md)", []*cliconf.Option[Config]{
		{Name: "filter-rules", Arg: "file", Default: "",
			Usage:   "YAML or JSON file listing flow filter rules (docs/filters.md); the config file may list them inline under filter_rules instead",
			Set:     setFilterRulesFile,
			SetNode: setFilterRulesInline},
		{Name: "filter-default", Arg: "accept|reject", Default: "reject",
			Usage: "what happens to packets no filter rule matches; without rules every packet is kept, whatever this says",
			Set:   setFilterDefault},
	}),
	// Usage and default come from the registered features (features.go),
	// whose own options follow this row.
	cliconf.InSection("Features", []*cliconf.Option[Config]{
		{Name: "features", Arg: "list", SetList: setFeatures},
		{Name: "enrich-unwatched", Arg: "bool", Default: "false", Bool: true,
			Usage: "have the drops, rtt and retransmits hooks, which see the whole host, also record flows no watched interface carried (sockets on an unwatched loopback or namespace) as partial records",
			Set:   cliconf.Bool(func(c *Config) *bool { return &c.EnrichUnwatched })},
	}),
	cliconf.InSection("Packet capture (docs/capture.md)", []*cliconf.Option[Config]{
		{Name: "capture", Arg: "bool", Default: strconv.FormatBool(DefaultCapture), Bool: true,
			Usage: "accept packet capture requests (flowlens capture, relayed by the collector); false refuses them with an error saying so",
			Set:   cliconf.Bool(func(c *Config) *bool { return &c.Capture })},
		{Name: "capture-max-snaplen", Arg: "bytes", Default: itoa(DefaultCaptureMaxSnaplen),
			Usage: "most bytes a capture copies of each packet (1 to 65000); a request asking more gets this, and its result says so. The default copies headers only; raise it to see payload",
			Set:   cliconf.Int(func(c *Config) *int { return &c.CaptureMaxSnaplen })},
	}),
	cliconf.InSection("Export", []*cliconf.Option[Config]{
		{Name: "export", Arg: "list", Default: DefaultExport,
			Usage:   "exporters: stdout, grpc, ipfix, kafka, otlp",
			SetList: func(c *Config, v []string) error { c.Export = v; return nil }},
		{Name: "export-buffer", Arg: "n", Default: "0",
			Usage: "batches queued per exporter; when full, eviction waits for room (up to half the eviction period per exporter), then the oldest are dropped, counted; the grpc exporter also keeps at most this many batches sent and not yet acknowledged by the collector, to send again after a reconnection (0 to 100000; 0 = 8, and at most a share of --cache-max-flows in records: docs/design/faults.md)",
			Set:   cliconf.Int(func(c *Config) *int { return &c.ExportBuffer })},
	}),
	cliconf.InSection("gRPC exporter", []*cliconf.Option[Config]{
		{Name: "target", Arg: "host:port", Default: "",
			Usage: "collector address for the grpc exporter; required with --export grpc",
			Set:   func(c *Config, s string) error { c.Target = s; return nil }},
		{Name: "grpc-batch-size", Arg: "n", Default: itoa(DefaultGRPCBatchSize),
			Usage: "flows per grpc message (1 to 100000)",
			Set:   cliconf.Int(func(c *Config) *int { return &c.GRPCBatchSize })},
	}, grpcTLS.Options(), []*cliconf.Option[Config]{
		{Name: "insecure-plaintext", Arg: "bool", Default: "false", Bool: true,
			Usage: "export over plaintext gRPC to a --target that is not loopback (anyone on the path reads and forges flows: for tests only)",
			Set:   cliconf.Bool(func(c *Config) *bool { return &c.InsecurePlaintext })},
		{Name: "token-file", Arg: "file", Default: "",
			Usage: "file holding a bearer token sent with every grpc export stream (the collector's --auth kubernetes: a projected ServiceAccount token of audience flowlens-collector), read again when it changes; needs --tls unless --insecure-plaintext",
			Set:   func(c *Config, s string) error { c.TokenFile = s; return nil }},
	}),
	cliconf.InSection("IPFIX exporter", []*cliconf.Option[Config]{
		{Name: "ipfix-target", Arg: "host:port", Default: "",
			Usage: "IPFIX collector address; required with --export ipfix",
			Set:   func(c *Config, s string) error { c.IPFIXTarget = s; return nil }},
		{Name: "ipfix-transport", Arg: "udp|tcp", Default: DefaultIPFIXTransport,
			Usage: "transport to the IPFIX collector",
			Set:   func(c *Config, s string) error { c.IPFIXTransport = s; return nil }},
		{Name: "ipfix-domain-id", Arg: "n", Default: itoa(DefaultIPFIXDomainID),
			Usage: "IPFIX observation domain id of the exported messages (0 to 4294967295)",
			Set:   setIPFIXDomainID},
		{Name: "ipfix-template-refresh", Arg: "duration", Default: DefaultIPFIXTemplateRefresh.String(),
			Usage: "how often the IPFIX templates are resent over UDP (1s to 1h); they are also sent in the first message",
			Set:   cliconf.Duration(func(c *Config) *time.Duration { return &c.IPFIXTemplateRefresh })},
		{Name: "ipfix-max-message-size", Arg: "bytes", Default: "0",
			Usage: "largest IPFIX message, filled with as many flows as fit: 1024 to 65507 over UDP (keep it under the path MTU less 48 bytes of IPv6 and UDP headers), to 65535 over TCP; 0 = over UDP the path MTU to the target less 100 bytes (1400 for 1500), 65535 over TCP",
			Set:   cliconf.Int(func(c *Config) *int { return &c.IPFIXMaxMessageSize })},
		{Name: "ipfix-enterprise-number", Arg: "pen", Default: "32473",
			Usage: "IANA Private Enterprise Number of flowlens's own IPFIX elements (1 to 4294967295); the default 32473 is IANA's number for documentation (RFC 5612), to be replaced by flowlens's registered number once there is one, or set to your site's",
			Set:   setIPFIXEnterpriseNumber},
	}),
	cliconf.InSection("Kafka exporter", kafkaOptions),
	cliconf.InSection("OTLP exporter", []*cliconf.Option[Config]{
		{Name: "otlp-endpoint", Arg: "host:port", Default: "",
			Usage: "OTLP receiver address (e.g. an OpenTelemetry Collector); required with --export otlp",
			Set:   func(c *Config, s string) error { c.OTLPEndpoint = s; return nil }},
		{Name: "otlp-protocol", Arg: "grpc|http", Default: DefaultOTLPProtocol,
			Usage: "OTLP transport: grpc (LogsService/Export) or http (protobuf POST to /v1/logs)",
			Set:   func(c *Config, s string) error { c.OTLPProtocol = s; return nil }},
		{Name: "otlp-headers", Arg: "list", Default: "",
			Usage:   "key=value headers sent with every OTLP request (gRPC metadata or HTTP headers), e.g. authorization=Bearer x; the config file may give them as a mapping",
			SetList: setOTLPHeaders,
			SetNode: setOTLPHeadersNode},
		{Name: "otlp-compression", Arg: "none|gzip", Default: "none",
			Usage: "compression of the OTLP requests",
			Set:   func(c *Config, s string) error { c.OTLPCompression = s; return nil }},
		{Name: "otlp-batch-flows", Arg: "n", Default: itoa(DefaultOTLPBatchFlows),
			Usage: "most flows (log records) per OTLP request (1 to 100000)",
			Set:   cliconf.Int(func(c *Config) *int { return &c.OTLPBatchFlows })},
	}, otlpTLS.Options()),
	cliconf.InSection("Metrics", cliconf.MetricsServer[Config]{Port: DefaultMetricsPort, Doc: "docs/metrics-agent.md",
		Address:       func(c *Config) *string { return &c.MetricsAddress },
		WebConfigFile: func(c *Config) *string { return &c.WebConfigFile }}.Options(), []*cliconf.Option[Config]{
		{Name: "bpf-stats", Arg: "on|off", Default: "on",
			Usage: "keep the kernel's BPF run-time statistics on while the agent runs (flowlens_agent_bpf_program_* metrics); off saves every BPF program on the node two clock reads per run",
			Set:   cliconf.OnOff(func(c *Config) *bool { return &c.BPFStats })},
	}),
	cliconf.InSection("Agent", []*cliconf.Option[Config]{
		{Name: "node-name", Arg: "name", Default: "",
			Usage: "name of this node in exported flows (default $NODE_NAME, else the hostname)",
			Set:   func(c *Config, s string) error { c.NodeName = s; return nil }},
		{Name: "log-level", Arg: "level", Default: DefaultLogLevel,
			Usage: "debug, info, warn or error",
			Set:   setLogLevel},
	}),
)

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

func setTCAttach(c *Config, s string) error {
	switch s {
	case "auto", "clsact":
		c.ForceClsact = s == "clsact"
		return nil
	}
	return errors.New("must be auto or clsact")
}

package config

import (
	"log/slog"
	"time"

	"github.com/flowlens/flowlens/internal/agent/flowrules"
)

// Config is the agent's whole configuration. Load returns one that has passed
// Validate; code building a Config by hand should call Validate itself.
type Config struct {
	// Interfaces and ExcludeInterfaces hold interface names and /regex/
	// patterns; see InterfaceSelection. An empty Interfaces means every
	// interface.
	Interfaces        []string
	ExcludeInterfaces []string

	// Netns lists the network namespaces to watch: "host" (the agent's own),
	// "all" (host plus every namespace under NetnsDir as they come and go)
	// or names of namespaces under NetnsDir.
	Netns    []string
	NetnsDir string
	// ForceClsact attaches with a clsact qdisc and cls_bpf filters even
	// where the kernel has tcx (--tc-attach=clsact).
	ForceClsact bool
	// EnrichUnwatched has the drops, RTT and retransmit hooks, which see
	// the whole host, record flows no watched interface carried
	// (--enrich-unwatched); by default they make no record.
	EnrichUnwatched bool

	// CacheActiveTimeout is how often flows are evicted from the kernel, and
	// CacheMaxFlows the size of the in-kernel flow map.
	CacheActiveTimeout time.Duration
	CacheMaxFlows      int

	// Sampling is 1 in how many packets is accounted; 1 means every packet.
	Sampling uint32

	// OverlayOuterFlows exports the node-to-node tunnel flows as records
	// marked overlay_outer, which sums skip (--overlay-outer-flows).
	OverlayOuterFlows bool

	// FilterRules are the flow filter rules in the order given, read from
	// FilterRulesFile (--filter-rules), or listed inline under the config
	// file's filter_rules key, FilterRulesFile then being "". No rules: no
	// filtering. FilterDefault is the action for packets no rule matches; it
	// is not used without rules. FilterTable compiles them for the datapath.
	FilterRules     []flowrules.Rule
	FilterRulesFile string
	FilterDefault   flowrules.Action

	// Capture accepts packet capture requests (--capture);
	// CaptureMaxSnaplen bounds the bytes copied of each packet
	// (--capture-max-snaplen). internal/agent/capture applies both.
	Capture           bool
	CaptureMaxSnaplen int

	// Export names the exporters ("stdout", "grpc", "ipfix", "kafka", "otlp"); Target is the
	// grpc collector's host:port.
	Export        []string
	Target        string
	GRPCBatchSize int
	// The ipfix exporter: the collector's host:port, "udp" or "tcp", the
	// observation domain id, how often the templates are resent over UDP,
	// the largest message (0: the transport's default) and the enterprise
	// number of flowlens's own elements (docs/export.md).
	IPFIXTarget           string
	IPFIXTransport        string
	IPFIXDomainID         uint32
	IPFIXTemplateRefresh  time.Duration
	IPFIXMaxMessageSize   int
	IPFIXEnterpriseNumber uint32
	// The otlp exporter (docs/export.md): the receiver's host:port,
	// "grpc" or "http", TLS (on when OTLPTLS or any file is set), headers
	// sent with every request (lower-case keys), "none" or "gzip", and the
	// most log records per request.
	OTLPEndpoint    string
	OTLPProtocol    string
	OTLPTLS         bool
	OTLPTLSCA       string
	OTLPTLSCert     string
	OTLPTLSKey      string
	OTLPHeaders     map[string]string
	OTLPCompression string
	OTLPBatchFlows  int
	// The kafka exporter (--kafka-*).
	Kafka Kafka
	// ExportBuffer is how many batches each exporter queue holds. When a
	// queue is full the evictor waits for room (for up to half the eviction
	// period in all), then drops the oldest batches, counted. It also
	// bounds the batches the grpc exporter keeps unacknowledged
	// (grpc.Config.MaxUnackedBatches). 0 means DefaultExportBuffer (see
	// ExportQueueBatches), and then the queues' records are bounded too,
	// by the flow map's size (the agent's memory budget, ExportFlows): a
	// flood's full batches wait in the flow map, not in the queues.
	ExportBuffer int

	// The grpc exporter's TLS: on when TLS is set or any file is given
	// (GRPCTLSOn); the files, empty when not used.
	TLS     bool
	TLSCA   string
	TLSCert string
	TLSKey  string
	// InsecurePlaintext allows a plaintext grpc exporter to a --target
	// that is not loopback.
	InsecurePlaintext bool
	// TokenFile holds the bearer token the grpc exporter sends with every
	// stream (a projected ServiceAccount token); read again when it
	// changes. "": none.
	TokenFile string

	// Features are the enabled optional kernel features (--features), by
	// name, in the registry's order; nil for none.
	Features []string
	// FeatureOptions hold each feature's own options (e.g. the dns
	// feature's --dns-ports), by feature name, in a struct of the
	// feature's type: see FeatureOptions.
	FeatureOptions map[string]any

	// MetricsAddress is where Prometheus metrics are served; "" disables.
	MetricsAddress string
	// WebConfigFile is an exporter-toolkit web configuration file (TLS,
	// client certificates) for the metrics server; "" serves plain HTTP.
	WebConfigFile string
	// BPFStats keeps the kernel's BPF run-time statistics on while the
	// agent runs, for the per-program cost metrics. They cost every BPF
	// program on the node two clock reads per run, so they can be turned off.
	BPFStats bool
	NodeName string
	LogLevel slog.Level

	// ConfigFile is the YAML file the configuration was read from, "" if
	// none; kept so the agent can log where its settings came from.
	ConfigFile string
}

// DefaultExportBuffer is the export queue's default capacity in batches:
// enough to keep an exporter busy while the evictor reads on, small enough
// that the records waiting for export take a few MB whatever the size of an
// eviction (the evictor waits for room instead of buffering an eviction).
const DefaultExportBuffer = 8

// ExportQueueBatches is the export queue's capacity in batches: ExportBuffer,
// or DefaultExportBuffer when it is 0.
func (c *Config) ExportQueueBatches() int {
	if c.ExportBuffer > 0 {
		return c.ExportBuffer
	}
	return DefaultExportBuffer
}

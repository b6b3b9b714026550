package collector

import (
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/flowlens/flowlens/internal/collector/collectoropt"
	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// The defaults the operator's renderer also writes live in collectoropt,
// which links nothing else; these names keep the collector's own code short.
const (
	DefaultKafkaGroup  = collectoropt.DefaultKafkaGroup
	DefaultMetricsPort = collectoropt.DefaultMetricsPort
	OutputNone         = collectoropt.OutputNone
	OutputJSON         = collectoropt.OutputJSON
	OutputTable        = collectoropt.OutputTable
	AuthAuto           = collectoropt.AuthAuto
	AuthKubernetes     = collectoropt.AuthKubernetes
	AuthNone           = collectoropt.AuthNone
)

// Limits of the values the range checks accept.
const (
	minMessageBytes = 1 << 10
	maxMessageBytes = 1 << 30
)

// Spec is the collector's option table: the machinery every binary shares
// (package cliconf) with its own prefix, so --max-agents is also
// FLOWLENS_COLLECTOR_MAX_AGENTS and the key max_agents in the YAML file
// named by --config or FLOWLENS_COLLECTOR_CONFIG. It fills a Config; Load
// is how the command and tests use it.
var Spec = &cliconf.Spec[Config]{
	Program:   "flowlens-collector",
	Summary:   "Receives flows from flowlens agents (--export grpc --target host:port), enriches them with Kubernetes context, serves Prometheus metrics and prints them on stdout.",
	EnvPrefix: "FLOWLENS_COLLECTOR_",
	Validate:  (*Config).validate,
	Options: slices.Concat(
		cliconf.InSection("Receiving from agents", []*cliconf.Option[Config]{
			{Name: "listen", Arg: "host:port", Default: ":9990",
				Usage: `address serving agents (Export) and the flow history (GetFlows); "" serves no gRPC at all (e.g. a collector that only consumes Kafka); an address that is not loopback needs --tls-cert or --insecure-plaintext`,
				Set:   cliconf.String(func(o *Config) *string { return &o.Listen })},
			{Name: "insecure-plaintext", Arg: "bool", Default: "false", Bool: true,
				Usage: "serve plaintext gRPC on an address that is not loopback (anyone on the network reads and writes flows: for tests only)",
				Set:   cliconf.Bool(func(o *Config) *bool { return &o.InsecurePlaintext })},
			{Name: "tls-cert", Arg: "file",
				Usage: "server certificate (serve TLS); needs --tls-key",
				Set:   cliconf.String(func(o *Config) *string { return &o.TLSCert })},
			{Name: "tls-key", Arg: "file",
				Usage: "server key",
				Set:   cliconf.String(func(o *Config) *string { return &o.TLSKey })},
			{Name: "tls-client-ca", Arg: "file",
				Usage: "CA that agents' client certificates must chain to (mTLS); needs --tls-cert",
				Set:   cliconf.String(func(o *Config) *string { return &o.TLSClientCA })},
			{Name: "auth", Arg: "auto|kubernetes|none", Default: AuthAuto,
				Usage: "per-call authorization: kubernetes checks every caller's bearer token (TokenReview, SubjectAccessReview: Export needs create, GetFlows get on flowcollectors/flows in API group flowlens.io) or mTLS certificate, and refuses flows of another node than the caller's; none checks nothing; auto: kubernetes in a cluster or with --kubeconfig, else none (docs/security.md)",
				Set:   setAuth},
			{Name: "max-message-bytes", Arg: "n", Default: strconv.Itoa(receiver.DefaultMaxMessageBytes),
				Usage: "largest message accepted (bytes); larger ones get ResourceExhausted (1024 to 1073741824)",
				Set:   cliconf.Int(func(o *Config) *int { return &o.Limits.MaxMessageBytes })},
			{Name: "max-flows-per-batch", Arg: "n", Default: strconv.Itoa(receiver.DefaultMaxFlowsPerBatch),
				Usage: "most flows accepted in one message (at least 1)",
				Set:   cliconf.Int(func(o *Config) *int { return &o.Limits.MaxFlowsPerBatch })},
			{Name: "max-agents", Arg: "n", Default: strconv.Itoa(receiver.DefaultMaxStreams),
				Usage: "most agent streams served at once, and as many capture streams (AgentCapture, one per agent identity) (-1: unlimited)",
				Set:   cliconf.Int(func(o *Config) *int { return &o.Limits.MaxStreams })},
			{Name: "max-agents-per-client", Arg: "n", Default: strconv.Itoa(receiver.DefaultMaxStreamsPerClient),
				Usage: "most agent streams of one client (its certificate's CN, else its IP address) at once, so that none takes the others' slots; raise it when agents reach the collector through one NAT address or proxy (-1: unlimited)",
				Set:   cliconf.Int(func(o *Config) *int { return &o.Limits.MaxStreamsPerClient })},
			{Name: "ack-state-file", Arg: "file",
				Usage: `where the collector writes the last message it applied for each agent instance (ExportAcked), and reads it back at start, so that a collector restarted after a crash or SIGKILL does not apply again what an agent resends (docs/grpc.md); "": in memory only. Give it a volume that outlives the process (an emptyDir survives container restarts)`,
				Set:   cliconf.String(func(o *Config) *string { return &o.Limits.AckStateFile })},
			{Name: "max-agent-instances", Arg: "n", Default: strconv.Itoa(receiver.DefaultMaxAgentInstances),
				Usage: "most agent instances (agent process starts) whose last applied message is remembered; the one idle longest is forgotten first (at least 1)",
				Set:   cliconf.Int(func(o *Config) *int { return &o.Limits.MaxAgentInstances })},
		}),
		cliconf.InSection("Kafka consumer", kafkaConn.Options(), []*cliconf.Option[Config]{
			{Name: "kafka-topic", Arg: "name", Default: "flowlens-flows",
				Usage: "Kafka topic the agents produce flows to",
				Set:   cliconf.String(func(o *Config) *string { return &o.Kafka.Topic })},
			{Name: "kafka-group", Arg: "name", Default: DefaultKafkaGroup,
				Usage: "Kafka consumer group: the collectors of one group share the topic's partitions",
				Set:   cliconf.String(func(o *Config) *string { return &o.Kafka.Group })},
			{Name: "kafka-start-offset", Arg: "latest|earliest", Default: receiver.KafkaStartLatest,
				Usage: "where a new consumer group (no committed offset) starts: latest, the topic's end (flows produced from then on), or earliest, replaying what the topic keeps into the metrics",
				Set:   cliconf.String(func(o *Config) *string { return &o.Kafka.StartOffset })},
			{Name: "kafka-session-timeout", Arg: "duration", Default: receiver.DefaultKafkaSessionTimeout.String(),
				Usage: "how long the group waits for a collector that stopped (killed) before its partitions go to the others (6s to 30m, within the brokers' group.{min,max}.session.timeout.ms)",
				Set:   cliconf.Duration(func(o *Config) *time.Duration { return &o.Kafka.SessionTimeout })},
		}),
		cliconf.InSection("Output", []*cliconf.Option[Config]{
			{Name: "output", Arg: "format", Default: OutputJSON,
				Usage: "output format: json (one object per line), table (one line per flow) or none (metrics only)",
				Set:   setOutput},
			{Name: "ip", Arg: "list", Repeat: true,
				Usage:   "only print flows with one of these source or destination addresses or CIDRs (metrics count every flow)",
				SetList: setIPs},
			{Name: "port", Arg: "list", Repeat: true,
				Usage:   "only print flows with one of these source or destination ports",
				SetList: setPorts},
			{Name: "proto", Arg: "list", Repeat: true,
				Usage:   "only print flows of these protocols: tcp, udp, icmp, icmpv6, sctp, gre, esp or a number",
				SetList: setProtos},
		}),
		cliconf.InSection("Kubernetes enrichment", []*cliconf.Option[Config]{
			{Name: "k8s-enrich", Arg: "true|false|auto", Default: "auto", Bool: true,
				Usage: "resolve addresses to Kubernetes context; auto: on in a cluster or with --kubeconfig",
				Set:   setEnrich},
			{Name: "kubeconfig", Arg: "file",
				Usage: "kubeconfig file for enrichment (default: the in-cluster service account)",
				Set:   cliconf.String(func(o *Config) *string { return &o.Enrichment.Kubeconfig })},
			{Name: "k8s-sync-timeout", Arg: "duration", Default: "1m",
				Usage: "how long to wait for the Kubernetes caches before receiving flows anyway",
				Set:   cliconf.Duration(func(o *Config) *time.Duration { return &o.Enrichment.SyncTimeout })},
			{Name: "k8s-static", Arg: "file",
				Usage: `resolve addresses from this JSON file instead of a cluster: {"10.0.0.1": {"kind": "pod", "namespace": "shop", "name": "web-1", "workload": "web", "workload_kind": "Deployment", "node": "node-a"}, ...}`,
				Set:   cliconf.String(func(o *Config) *string { return &o.Enrichment.StaticFile })},
			{Name: "subnet-labels", Arg: "list", Repeat: true,
				Usage:   "name=CIDR labels for addresses outside the cluster (longest prefix wins)",
				SetList: setSubnets},
		}),
		cliconf.InSection("Metrics", cliconf.MetricsServer[Config]{Port: DefaultMetricsPort, Doc: "docs/metrics.md",
			Address:       func(o *Config) *string { return &o.MetricsAddress },
			WebConfigFile: func(o *Config) *string { return &o.WebConfigFile }}.Options(), []*cliconf.Option[Config]{
			{Name: "metrics", Arg: "list", Default: "all", Repeat: true,
				Usage:   "flow metrics to serve, by name with or without the flowlens_collector_ prefix; all, or none for only the health metrics; see docs/metrics.md",
				SetList: setMetrics},
			{Name: "pod-labels", Arg: "bool", Default: "false", Bool: true,
				Usage: "add src_pod and dst_pod labels to flow_bytes_total and flow_packets_total (cardinality grows with pods)",
				Set:   cliconf.Bool(func(o *Config) *bool { return &o.Metrics.PodLabels })},
			{Name: "metrics-series-ttl", Arg: "duration", Default: enrich.DefaultSeriesTTL.String(),
				Usage: "delete a flow metric's series once no flow updated it for this long (workloads, pods, nodes that are gone); 0: never",
				Set:   cliconf.Duration(func(o *Config) *time.Duration { return &o.Metrics.SeriesTTL })},
			{Name: "metrics-max-series", Arg: "n", Default: strconv.Itoa(enrich.DefaultMaxSeries),
				Usage: "most series of each flow metric; past it, flows count in the metric's _overflow series and in flowlens_collector_metric_series_limited_total (0: no cap)",
				Set:   cliconf.Int(func(o *Config) *int { return &o.Metrics.MaxSeries })},
		}),
		cliconf.InSection("Flow history", historyOptions),
		cliconf.InSection("Service map", uiOptions),
		cliconf.InSection("Collector", []*cliconf.Option[Config]{
			{Name: "shutdown-grace", Arg: "duration", Default: "10s",
				Usage: "how long shutdown waits for batches being handled",
				Set:   cliconf.Duration(func(o *Config) *time.Duration { return &o.ShutdownGrace })},
			{Name: "log-level", Arg: "level", Default: "info",
				Usage: "debug, info, warn or error (logs go to stderr)",
				Set:   cliconf.Level(func(o *Config) *slog.Level { return &o.LogLevel })},
		}),
	),
}

// Load builds the configuration from args, the FLOWLENS_COLLECTOR_*
// variables env looks up (nil: none) and the YAML file they name, and
// checks it; see cliconf.Spec.Load.
func Load(args []string, env func(string) string) (*Config, error) {
	return Spec.Load(args, env)
}

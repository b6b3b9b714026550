package main

import (
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/httpserve"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// options is the collector's whole configuration, filled in by parseFlags.
type options struct {
	listen  string
	output  string
	history historyOptions
	filter  filter
	tlsCert string
	tlsKey  string
	tlsCA   string
	limits  receiver.Options
	grace   time.Duration
	level   slog.Level

	metricsAddr string
	webConfig   string // --web-config-file
	metrics     enrich.MetricsOptions

	// kafka: consume the topic as a member of the group when brokers are set.
	kafka receiver.ConsumerOptions

	// Enrichment: enrich is the --k8s-enrich value, enrichSet whether it
	// was given as true or false (auto: on in a cluster or with --kubeconfig).
	enrich      bool
	enrichSet   bool
	kubeconfig  string
	syncTimeout time.Duration
	static      string // --k8s-static file
	subnets     *k8smeta.Subnets
}

// Limits of the values the range checks accept.
const (
	minMessageBytes = 1 << 10
	maxMessageBytes = 1 << 30
)

// spec is the collector's configuration: the agent's machinery (package
// cliconf) with its own prefix, so --max-agents is also
// FLOWLENS_COLLECTOR_MAX_AGENTS and the key max_agents in the YAML file
// named by --config or FLOWLENS_COLLECTOR_CONFIG.
var spec = &cliconf.Spec[options]{
	Program:   "flowlens-collector",
	Summary:   "Receives flows from flowlens agents (--export grpc --target host:port), enriches them with Kubernetes context, serves Prometheus metrics and prints them on stdout.",
	EnvPrefix: "FLOWLENS_COLLECTOR_",
	Validate:  (*options).validate,
	Options: slices.Concat(
		cliconf.InSection("Receiving from agents", []*cliconf.Option[options]{
			{Name: "listen", Arg: "host:port", Default: ":9990",
				Usage: "address to receive flows on",
				Set:   cliconf.String(func(o *options) *string { return &o.listen })},
			{Name: "tls-cert", Arg: "file",
				Usage: "server certificate (serve TLS); needs --tls-key",
				Set:   cliconf.String(func(o *options) *string { return &o.tlsCert })},
			{Name: "tls-key", Arg: "file",
				Usage: "server key",
				Set:   cliconf.String(func(o *options) *string { return &o.tlsKey })},
			{Name: "tls-client-ca", Arg: "file",
				Usage: "CA that agents' client certificates must chain to (mTLS); needs --tls-cert",
				Set:   cliconf.String(func(o *options) *string { return &o.tlsCA })},
			{Name: "max-message-bytes", Arg: "n", Default: strconv.Itoa(receiver.DefaultMaxMessageBytes),
				Usage: "largest message accepted (bytes); larger ones get ResourceExhausted (1024 to 1073741824)",
				Set:   cliconf.Int(func(o *options) *int { return &o.limits.MaxMessageBytes })},
			{Name: "max-flows-per-batch", Arg: "n", Default: strconv.Itoa(receiver.DefaultMaxFlowsPerBatch),
				Usage: "most flows accepted in one message (at least 1)",
				Set:   cliconf.Int(func(o *options) *int { return &o.limits.MaxFlowsPerBatch })},
			{Name: "max-agents", Arg: "n", Default: strconv.Itoa(receiver.DefaultMaxStreams),
				Usage: "most agent streams served at once (-1: unlimited)",
				Set:   cliconf.Int(func(o *options) *int { return &o.limits.MaxStreams })},
		}),
		cliconf.InSection("Kafka consumer", kafkaConn.Options(), []*cliconf.Option[options]{
			{Name: "kafka-topic", Arg: "name", Default: "flowlens-flows",
				Usage: "Kafka topic the agents produce flows to",
				Set:   cliconf.String(func(o *options) *string { return &o.kafka.Topic })},
			{Name: "kafka-group", Arg: "name", Default: receiver.DefaultKafkaGroup,
				Usage: "Kafka consumer group: the collectors of one group share the topic's partitions",
				Set:   cliconf.String(func(o *options) *string { return &o.kafka.Group })},
			{Name: "kafka-session-timeout", Arg: "duration", Default: receiver.DefaultKafkaSessionTimeout.String(),
				Usage: "how long the group waits for a collector that stopped (killed) before its partitions go to the others (6s to 30m, within the brokers' group.{min,max}.session.timeout.ms)",
				Set:   cliconf.Duration(func(o *options) *time.Duration { return &o.kafka.SessionTimeout })},
		}),
		cliconf.InSection("Output", []*cliconf.Option[options]{
			{Name: "output", Arg: "format", Default: "json",
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
		cliconf.InSection("Kubernetes enrichment", []*cliconf.Option[options]{
			{Name: "k8s-enrich", Arg: "true|false|auto", Default: "auto", Bool: true,
				Usage: "resolve addresses to Kubernetes context; auto: on in a cluster or with --kubeconfig",
				Set:   setEnrich},
			{Name: "kubeconfig", Arg: "file",
				Usage: "kubeconfig file for enrichment (default: the in-cluster service account)",
				Set:   cliconf.String(func(o *options) *string { return &o.kubeconfig })},
			{Name: "k8s-sync-timeout", Arg: "duration", Default: "1m",
				Usage: "how long to wait for the Kubernetes caches before receiving flows anyway",
				Set:   cliconf.Duration(func(o *options) *time.Duration { return &o.syncTimeout })},
			{Name: "k8s-static", Arg: "file",
				Usage: `resolve addresses from this JSON file instead of a cluster: {"10.0.0.1": {"kind": "pod", "namespace": "shop", "name": "web-1", "workload": "web", "workload_kind": "Deployment", "node": "node-a"}, ...}`,
				Set:   cliconf.String(func(o *options) *string { return &o.static })},
			{Name: "subnet-labels", Arg: "list", Repeat: true,
				Usage:   "name=CIDR labels for addresses outside the cluster (longest prefix wins)",
				SetList: setSubnets},
		}),
		cliconf.InSection("Metrics", []*cliconf.Option[options]{
			{Name: "metrics-address", Arg: "host:port", Default: ":9401",
				Usage: `address serving /metrics, /healthz and /readyz; "" disables`,
				Set:   cliconf.String(func(o *options) *string { return &o.metricsAddr })},
			{Name: "web-config-file", Arg: "file", Default: "",
				Usage: "Prometheus exporter-toolkit web configuration file: serve the metrics over TLS, optionally requiring client certificates (docs/metrics.md); empty for plain HTTP",
				Set:   cliconf.String(func(o *options) *string { return &o.webConfig })},
			{Name: "metrics", Arg: "list", Default: "all", Repeat: true,
				Usage:   "flow metrics to serve, by name with or without the flowlens_collector_ prefix; all, or none for only the health metrics; see docs/metrics.md",
				SetList: setMetrics},
			{Name: "pod-labels", Arg: "bool", Default: "false", Bool: true,
				Usage: "add src_pod and dst_pod labels to flow_bytes_total and flow_packets_total (cardinality grows with pods)",
				Set:   cliconf.Bool(func(o *options) *bool { return &o.metrics.PodLabels })},
		}),
		cliconf.InSection("Flow history", historyFlags),
		cliconf.InSection("Collector", []*cliconf.Option[options]{
			{Name: "shutdown-grace", Arg: "duration", Default: "10s",
				Usage: "how long shutdown waits for batches being handled",
				Set:   cliconf.Duration(func(o *options) *time.Duration { return &o.grace })},
			{Name: "log-level", Arg: "level", Default: "info",
				Usage: "debug, info, warn or error (logs go to stderr)",
				Set:   cliconf.Level(func(o *options) *slog.Level { return &o.level })},
		}),
	),
}

// parseFlags builds the configuration from args, the FLOWLENS_COLLECTOR_*
// variables env looks up (nil: none) and the YAML file they name; see
// cliconf.Spec.Load.
func parseFlags(args []string, env func(string) string) (*options, error) {
	return spec.Load(args, env)
}

func setOutput(o *options, s string) error {
	switch s {
	case "json", "table", "none":
		o.output = s
		return nil
	}
	return errors.New("must be json, table or none")
}

func setIPs(o *options, items []string) error {
	o.filter.prefixes = nil
	for _, s := range items {
		if p, err := netip.ParsePrefix(s); err == nil {
			o.filter.prefixes = append(o.filter.prefixes, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return cliconf.ItemError(s, errors.New("must be an IP address or CIDR, such as 10.0.0.1 or 10.0.0.0/8"))
		}
		o.filter.prefixes = append(o.filter.prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return nil
}

func setPorts(o *options, items []string) error {
	o.filter.ports = nil
	for _, s := range items {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return cliconf.ItemError(s, errors.New("must be a port number from 0 to 65535"))
		}
		if o.filter.ports == nil {
			o.filter.ports = map[uint32]bool{}
		}
		o.filter.ports[uint32(p)] = true
	}
	return nil
}

func setProtos(o *options, items []string) error {
	o.filter.protos = nil
	for _, s := range items {
		n, ok := protoNames[strings.ToLower(s)]
		if !ok {
			v, err := strconv.ParseUint(s, 10, 8)
			if err != nil {
				return cliconf.ItemError(s, errors.New("must be tcp, udp, icmp, icmpv6, sctp, gre, esp or a protocol number from 0 to 255"))
			}
			n = uint32(v)
		}
		if o.filter.protos == nil {
			o.filter.protos = map[uint32]bool{}
		}
		o.filter.protos[n] = true
	}
	return nil
}

// setMetrics takes metric names; "all" alone means every flow metric (nil),
// "none" adds none, so "none" or an empty list leaves only the health
// metrics.
func setMetrics(o *options, items []string) error {
	if len(items) == 1 && items[0] == "all" {
		o.metrics.Enabled = nil
		return nil
	}
	o.metrics.Enabled = []string{}
	for _, m := range items {
		if m == "none" {
			continue
		}
		full := m
		if !strings.HasPrefix(full, enrich.Prefix) {
			full = enrich.Prefix + m
		}
		if !slices.Contains(enrich.FlowMetricNames, full) && !slices.Contains(enrich.HealthMetricNames, full) {
			var names []string
			for _, n := range enrich.FlowMetricNames {
				names = append(names, strings.TrimPrefix(n, enrich.Prefix))
			}
			return cliconf.ItemError(m, errors.New("unknown metric: must be all, none or some of "+strings.Join(names, ", ")))
		}
		o.metrics.Enabled = append(o.metrics.Enabled, m)
	}
	return nil
}

func setEnrich(o *options, s string) error {
	if strings.EqualFold(s, "auto") {
		o.enrich, o.enrichSet = false, false
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("must be true, false or auto")
	}
	o.enrich, o.enrichSet = b, true
	return nil
}

// setSubnets checks each name=CIDR in words of our own, then builds the
// table (which also refuses a prefix labelled twice).
func setSubnets(o *options, items []string) error {
	for _, s := range items {
		name, cidr, ok := strings.Cut(s, "=")
		name, cidr = strings.TrimSpace(name), strings.TrimSpace(cidr)
		if !ok || name == "" || cidr == "" {
			return cliconf.ItemError(s, errors.New("must be name=CIDR, such as corp=10.0.0.0/8"))
		}
		if _, err := netip.ParsePrefix(cidr); err != nil {
			return cliconf.ItemError(s, errors.New(strconv.Quote(cidr)+" is not a CIDR such as 10.0.0.0/8 or fd00::/8"))
		}
	}
	subnets, err := k8smeta.NewSubnets(items...)
	if err != nil {
		return err
	}
	o.subnets = subnets
	return nil
}

// validate checks the ranges and the combinations of settings, and returns
// every problem found, each naming the flag at fault.
func (o *options) validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(cliconf.CheckListenAddress("--listen", o.listen))
	add(o.history.validate())
	if (o.tlsCert == "") != (o.tlsKey == "") {
		add(errors.New("--tls-cert and --tls-key must be given together"))
	}
	if o.tlsCA != "" && o.tlsCert == "" {
		add(errors.New("--tls-client-ca needs --tls-cert and --tls-key"))
	}
	add(cliconf.CheckRange("--max-message-bytes", o.limits.MaxMessageBytes, minMessageBytes, maxMessageBytes))
	if n := o.limits.MaxFlowsPerBatch; n < 1 {
		add(cliconf.Invalid("--max-flows-per-batch", strconv.Itoa(n), errors.New("must be at least 1")))
	}
	if n := o.limits.MaxStreams; n != -1 && n < 1 {
		add(cliconf.Invalid("--max-agents", strconv.Itoa(n), errors.New("must be -1 (unlimited) or at least 1")))
	}
	add(checkPositive("--shutdown-grace", o.grace))
	add(cliconf.CheckLevel("--log-level", o.level))
	if o.metricsAddr != "" {
		add(cliconf.CheckListenAddress("--metrics-address", o.metricsAddr))
	}
	add(httpserve.CheckWebConfig("--web-config-file", o.webConfig))
	if o.static != "" && o.enrichSet && !o.enrich {
		add(errors.New("--k8s-static needs enrichment: drop --k8s-enrich=false"))
	}
	if o.static != "" && o.kubeconfig != "" {
		add(errors.New("--k8s-static and --kubeconfig: choose one"))
	}
	add(checkPositive("--k8s-sync-timeout", o.syncTimeout))
	add(o.checkKafka())
	// Checked here so a typo fails at start-up with the flag's name.
	for _, f := range []struct{ flag, path string }{
		{"--tls-cert", o.tlsCert}, {"--tls-key", o.tlsKey}, {"--tls-client-ca", o.tlsCA},
		{"--kubeconfig", o.kubeconfig}, {"--k8s-static", o.static},
	} {
		add(cliconf.CheckFile(f.flag, f.path))
	}
	return errors.Join(errs...)
}

func checkPositive(flagName string, d time.Duration) error {
	if d <= 0 {
		return cliconf.Invalid(flagName, d.String(), errors.New("must be more than 0"))
	}
	return nil
}

// kafkaConn is the connection to the brokers, a group the agent's kafka
// exporter shares (package cliconf).
var kafkaConn = cliconf.KafkaConn[options]{
	BrokersUsage: "Kafka bootstrap brokers, host:port: consume --kafka-topic as a member of --kafka-group (beside the gRPC listener)",
	Brokers:      func(o *options) *[]string { return &o.kafka.Brokers },
	TLS: cliconf.ClientTLS[options]{Prefix: "kafka-", Peer: "brokers", CAUsage: " (default: the system's roots)",
		On:   func(o *options) *bool { return &o.kafka.TLS },
		CA:   func(o *options) *string { return &o.kafka.TLSCA },
		Cert: func(o *options) *string { return &o.kafka.TLSCert },
		Key:  func(o *options) *string { return &o.kafka.TLSKey }},
	Mechanism:    func(o *options) *string { return &o.kafka.SASL },
	Username:     func(o *options) *string { return &o.kafka.SASLUser },
	PasswordFile: func(o *options) *string { return &o.kafka.SASLPasswordFile },
}

// checkKafka checks the --kafka-* settings (used when --kafka-brokers is set).
func (o *options) checkKafka() error {
	k := &o.kafka
	errs := []error{kafkaConn.Check(o)}
	if k.Topic == "" {
		errs = append(errs, cliconf.Invalid("--kafka-topic", "", errors.New("must not be empty")))
	}
	if k.Group == "" {
		errs = append(errs, cliconf.Invalid("--kafka-group", "", errors.New("must not be empty")))
	}
	if d := k.SessionTimeout; d < 6*time.Second || d > 30*time.Minute {
		errs = append(errs, cliconf.Invalid("--kafka-session-timeout", d.String(), errors.New("must be from 6s to 30m")))
	}
	return errors.Join(errs...)
}

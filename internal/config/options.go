package config

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/flowlens/flowlens/internal/cliconf"
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
	// bool: a flag that may be given without a value (--kafka-tls).
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
		usage:   "exporters: stdout, grpc, ipfix, kafka",
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

// splitList splits a comma-separated list: see cliconf.SplitList.
func splitList(s string) []string { return cliconf.SplitList(s) }

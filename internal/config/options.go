package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// option is one setting. Its flag name is the only spelling written down; the
// environment variable and YAML key are derived from it.
type option struct {
	name  string // flag name, e.g. "cache-active-timeout"
	arg   string // placeholder for the value in usage
	def   string // default, parsed like a user's value so usage cannot lie
	usage string
	// Exactly one of set and setList is non-nil. List options get their
	// entries already split so that a YAML sequence needs no comma splitting.
	set     func(c *Config, s string) error
	setList func(c *Config, items []string) error
}

func (o *option) envName() string {
	return "FLOWLENS_" + strings.ToUpper(strings.ReplaceAll(o.name, "-", "_"))
}

func (o *option) yamlKey() string { return strings.ReplaceAll(o.name, "-", "_") }

// apply sets the option from a value as written in a flag or environment
// variable, where lists are comma-separated.
func (o *option) apply(c *Config, s string) error {
	if o.setList != nil {
		return o.setList(c, splitList(s))
	}
	return o.set(c, s)
}

// options is in the order usage lists them and Validate checks them.
var options = []*option{
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
	{name: "export", arg: "list", def: "stdout",
		usage:   "exporters: stdout, grpc",
		setList: func(c *Config, v []string) error { c.Export = v; return nil }},
	{name: "target", arg: "host:port", def: "",
		usage: "collector address for the grpc exporter; required with --export grpc",
		set:   func(c *Config, s string) error { c.Target = s; return nil }},
	{name: "grpc-batch-size", arg: "n", def: "1000",
		usage: "flows per grpc message (1 to 100000)",
		set:   setInt(func(c *Config) *int { return &c.GRPCBatchSize })},
	{name: "export-buffer", arg: "n", def: "0",
		usage: "batches queued per exporter; when full, eviction waits for room (up to half the eviction period), then the oldest are dropped, counted (0 to 100000; 0 = 8)",
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
		usage:   `optional measurements: drops, rtt, retransmits; "none" or empty for none`,
		setList: setFeatures},
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
}

func setDuration(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("must be a duration such as 5s or 500ms")
		}
		*field(c) = d
		return nil
	}
}

func setInt(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return errors.New("must be an integer")
		}
		*field(c) = n
		return nil
	}
}

func setOnOff(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, s string) error {
		switch strings.ToLower(s) {
		case "on":
			*field(c) = true
		case "off":
			*field(c) = false
		default:
			return errors.New("must be on or off")
		}
		return nil
	}
}

func setSampling(c *Config, s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return errors.New("must be an integer from 1 to 4294967295")
	}
	c.Sampling = uint32(n)
	return nil
}

// levels are the log levels a user may name; slog accepts more (e.g.
// "info+2"), which would only confuse.
var levels = []struct {
	name  string
	level slog.Level
}{{"debug", slog.LevelDebug}, {"info", slog.LevelInfo}, {"warn", slog.LevelWarn}, {"error", slog.LevelError}}

const levelNames = "debug, info, warn, error"

func setLogLevel(c *Config, s string) error {
	for _, l := range levels {
		if strings.EqualFold(s, l.name) {
			c.LogLevel = l.level
			return nil
		}
	}
	return errors.New("must be one of " + levelNames)
}

const featureNames = "drops, rtt, retransmits"

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

// splitList splits a comma-separated list, trimming spaces and dropping empty
// entries. An entry that starts with "/" runs to the next "/" that ends an
// entry, so a regex such as /^eth[0-9]{1,2}$/ keeps its comma.
func splitList(s string) []string {
	var items []string
	for s != "" {
		s = strings.TrimLeft(s, " \t")
		end := strings.IndexByte(s, ',')
		if strings.HasPrefix(s, "/") {
			if e := patternEnd(s); e >= 0 {
				end = e
			}
		}
		item := s
		if end >= 0 && end < len(s) {
			item, s = s[:end], s[end+1:]
		} else {
			s = ""
		}
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}

// patternEnd returns the index of the comma (or len(s)) after the "/" closing
// the pattern at the start of s, or -1 if no "/" closes it.
func patternEnd(s string) int {
	for i := 1; i < len(s); i++ {
		if s[i] != '/' {
			continue
		}
		rest := strings.TrimLeft(s[i+1:], " \t")
		if rest == "" {
			return len(s)
		}
		if rest[0] == ',' {
			return len(s) - len(rest)
		}
	}
	return -1
}

package config

import (
	"log/slog"
	"strings"
	"time"
)

// Config is the agent's whole configuration. Load returns one that has passed
// Validate; code building a Config by hand should call Validate itself.
type Config struct {
	// Interfaces and ExcludeInterfaces hold interface names and /regex/
	// patterns; see NameFilter. An empty Interfaces means every interface.
	Interfaces        []string
	ExcludeInterfaces []string

	// Netns lists the network namespaces to watch: "host" (the agent's own),
	// "all" (host plus every namespace under NetnsDir as they come and go)
	// or names of namespaces under NetnsDir.
	Netns    []string
	NetnsDir string

	// CacheActiveTimeout is how often flows are evicted from the kernel, and
	// CacheMaxFlows the size of the in-kernel flow map.
	CacheActiveTimeout time.Duration
	CacheMaxFlows      int

	// Sampling is 1 in how many packets is accounted; 1 means every packet.
	Sampling uint32

	// Export names the exporters ("stdout", "grpc"); Target is the grpc
	// collector's host:port.
	Export        []string
	Target        string
	GRPCBatchSize int
	// ExportBuffer is how many batches each exporter buffers before the
	// oldest are dropped, so a slow exporter cannot stall eviction. 0 means
	// enough for one full eviction (see ExportQueueBatches).
	ExportBuffer int

	// TLS files for the grpc exporter; empty means not used.
	TLSCA   string
	TLSCert string
	TLSKey  string

	Features Features

	// MetricsAddress is where Prometheus metrics are served; "" disables.
	MetricsAddress string
	NodeName       string
	LogLevel       slog.Level

	// ConfigFile is the YAML file the configuration was read from, "" if
	// none; kept so the agent can log where its settings came from.
	ConfigFile string
}

// Features says which optional kernel measurements are enabled; each costs
// per-packet work, so they can be turned off one by one.
type Features struct {
	Drops       bool
	RTT         bool
	Retransmits bool
}

// String returns the features in --features syntax, e.g. "drops,rtt" or "none".
func (f Features) String() string {
	var names []string
	if f.Drops {
		names = append(names, "drops")
	}
	if f.RTT {
		names = append(names, "rtt")
	}
	if f.Retransmits {
		names = append(names, "retransmits")
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// ExportQueueBatches is the export queue's capacity in batches: ExportBuffer,
// or when it is 0 enough batches for one full eviction (a full flow map)
// plus two for overflow and partial records, so that a healthy exporter
// never loses flows to a burst, while memory stays bounded by the map size.
func (c *Config) ExportQueueBatches() int {
	if c.ExportBuffer > 0 {
		return c.ExportBuffer
	}
	return (c.CacheMaxFlows+c.GRPCBatchSize-1)/c.GRPCBatchSize + 2
}

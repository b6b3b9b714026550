package config

import (
	"slices"
	"strconv"
	"time"

	"github.com/flowlens/flowlens/internal/shared/cliconf"
)

// Defaults of the options another program also writes: the operator renders
// the agent's configuration from a FlowCollector and fills its unset fields
// with these (internal/operator/render imports them), so that each default
// is written once, here, and the options table's rows read them. A test of
// the operator's (render's TestRenderedDefaults) loads what it renders and
// fails when a key is not an option or differs from these.
const (
	DefaultExcludeInterfaces  = "lo"
	DefaultNetns              = "host"
	DefaultNetnsDir           = "/var/run/netns"
	DefaultCacheActiveTimeout = 5 * time.Second
	DefaultCacheMaxFlows      = 100000
	DefaultSampling           = 1
	DefaultExport             = "stdout"
	DefaultMetricsPort        = 9400
	DefaultLogLevel           = "info"

	DefaultGRPCBatchSize = 1000

	DefaultIPFIXTransport       = "udp"
	DefaultIPFIXDomainID        = 1
	DefaultIPFIXTemplateRefresh = time.Minute

	DefaultKafkaTopic         = "flowlens-flows" // the collector's --kafka-topic too (its TestOperatorArgs)
	DefaultKafkaCompression   = "lz4"
	DefaultKafkaLinger        = 50 * time.Millisecond
	DefaultKafkaMaxBatchBytes = 1 << 20
	DefaultKafkaAcks          = "all"
	DefaultKafkaMessage       = "batch"
	DefaultKafkaBatchFlows    = 1000

	DefaultCapture           = true
	DefaultCaptureMaxSnaplen = 128

	DefaultOTLPProtocol   = "grpc"
	DefaultOTLPBatchFlows = 1000
)

// EnvPrefix starts each of the agent's environment variables:
// FLOWLENS_AGENT_KAFKA_SASL_USERNAME is --kafka-sasl-username. The operator
// sets Secrets' values through them.
const EnvPrefix = "FLOWLENS_AGENT_"

// EnvName is the environment variable of the option named name (a flag
// name, e.g. "otlp-headers"). It panics if there is no such option: a caller
// names an option in code, and its tests then fail at once.
func EnvName(name string) string {
	for _, o := range spec.Options {
		if o.Name == name {
			return o.EnvName(EnvPrefix)
		}
	}
	panic("config.EnvName: no option --" + name)
}

// itoa is a default for a row of the options table.
func itoa(n int) string { return strconv.Itoa(n) }

// Options are the agent's options, in the order the help lists them: for
// the operator's tests, which check that what it renders is one of them.
func Options() []*cliconf.Option[Config] { return slices.Clone(spec.Options) }

// MaxCaptureSnaplen is the largest --capture-max-snaplen: a packet's copy
// and its metadata fit one perf sample, whose size is 16 bits.
const MaxCaptureSnaplen = 65000

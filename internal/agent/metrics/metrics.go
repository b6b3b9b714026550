// Package metrics is the agent's Prometheus registry, served with /healthz
// and /readyz over HTTP (internal/shared/httpserve).
//
// The stages register their own collectors in it (Registry): the datapath
// (datapath.Metrics: counters, flow map fill, hooks, filter rules, BPF
// programs and maps), the evictor (evictor.Metrics) and the exporters
// (exporter.NewCollector); internal/agent wires them. Every value is read
// when Prometheus scrapes; nothing polls in the background.
// docs/metrics-agent.md lists every metric.
package metrics

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/flowlens/flowlens/internal/shared/version"
)

// Namespace prefixes every agent metric.
const Namespace = "flowlens_agent"

// Options configure New.
type Options struct {
	// Ready reports whether the agent is ready (nil error); /readyz
	// answers 503 with the error otherwise. Nil: always ready.
	Ready func() error
	// NoRuntimeMetrics leaves out the Go runtime (go_*) and process
	// (process_*) collectors.
	NoRuntimeMetrics bool
	Logger           *slog.Logger
}

// Metrics is the agent's registry.
type Metrics struct {
	reg  *prometheus.Registry
	opts Options
	log  *slog.Logger
}

// New builds the registry with the stages' collectors cs, the build info
// and, unless NoRuntimeMetrics, the Go runtime's and the process's.
func New(opts Options, cs ...prometheus.Collector) (*Metrics, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := &Metrics{reg: prometheus.NewRegistry(), opts: opts, log: opts.Logger}
	cs = append(cs, version.NewCollector(Namespace))
	if !opts.NoRuntimeMetrics {
		cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Registry is the registry the metrics live in.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

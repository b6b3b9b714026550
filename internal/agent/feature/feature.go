// Package feature defines the one shape every optional kernel feature of the
// agent has (drops, rtt, retransmits; next: dns, xlat, tls, filters), in the
// spirit of Retina's plugins. A feature is:
//
//   - its BPF header in bpf/ (bpf/<name>.h, included by bpf/datapath.c),
//     writing the enrichment maps of bpf/maps.h;
//   - its Go package, internal/agent/feature/<name>, implementing Feature: its
//     name and docs, its options (flag rows, validation: Config), its kernel
//     plan (programs in order of preference, with their fallbacks,
//     load-time constants and map sizes), the record fields it fills from
//     the enrichment entry, and its tests;
//   - its record group in the record model (pkg/flow/<name>.go) and its
//     encodings;
//   - one line in internal/agent/feature/registry, the only list of
//     features: --features, the agent's configuration and the CRD's enum
//     (api/v1alpha1, generated) derive from it.
//
// The registry's conformance test lists the files a feature touches and
// fails when one is missing (go test -v ./internal/agent/feature/registry).
//
// The agent configures the enabled features (--features) from the loaded
// configuration, starts their hooks, and the evictor calls Fill on each
// running feature for every flow that has an enrichment entry.
package feature

import (
	"time"

	"github.com/cilium/ebpf/btf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Feature is one optional kernel measurement.
type Feature interface {
	// Name is the --features value and the hook metric label ("drops").
	Name() string
	// Doc says in one line what the feature adds to a flow.
	Doc() string
	// DocPage is the page that documents the feature: docs/<name>.md, or
	// a section of a page ("README.md#heading-slug").
	DocPage() string
	// Config is what the agent's configuration knows of the feature: its
	// --features entry and its own options (the registry sets Name).
	Config() config.Feature
	// Configure reads the feature's options from the loaded configuration;
	// called once, before Plan.
	Configure(c *config.Config)
	// Plan prepares the feature for this kernel and returns its programs
	// and fallbacks. kernel is the running kernel's BTF, nil when it cannot
	// be read (the feature then uses its defaults). Called once, at start.
	Plan(kernel *btf.Spec) datapath.Plan
	// Fields are the JSON names of the record fields Fill sets.
	Fields() []string
	// Fill copies the feature's part of a flow's enrichment entry into r.
	Fill(r *flow.Record, v *datapath.EnrichValue)
}

// NoOptions is embedded by the features that have no options of their own.
type NoOptions struct{}

// Configure has nothing to read.
func (NoOptions) Configure(*config.Config) {}

// A Sweeper is a feature whose kernel state outlives a generation: the
// evictor calls Sweep once per eviction, after the flip and after reading
// the ended generation's enrichment entries, before it merges them into the
// flow records. Sweep reports, in the ended generation's records, what
// expired in the kernel by end (the flip, on CLOCK_MONOTONIC: the clock of
// bpf_ktime_get_ns), through entry: the ended generation's enrichment entry
// of a flow, a zero one added when the flow has none (so that the flow has
// a record in that period even without a packet in it: a partial record).
// The pointer entry returns is valid until the next call of entry.
type Sweeper interface {
	Sweep(m *datapath.Maps, end time.Duration, entry func(k *datapath.FlowKey) *datapath.EnrichValue) error
}

// An Annotator is a feature that adds to every flow record, not only to
// the flows with an enrichment entry (Fill): dns's names of the addresses
// its answers gave. The evictor calls Annotate on each record it hands on,
// after Fill, on the goroutine Sweep runs on.
type Annotator interface {
	Annotate(r *flow.Record)
}

// A MetricsSource is a feature with metrics of its own (the agent registers
// them beside the stages').
type MetricsSource interface {
	Collectors(namespace string, m *datapath.Maps) []prometheus.Collector
}

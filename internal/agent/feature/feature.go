// Package feature defines the one shape every optional kernel feature of the
// agent has (drops, rtt, retransmits; next: dns, xlat, tls, filters), in the
// spirit of Retina's plugins. A feature is:
//
//   - its BPF header in bpf/ (bpf/<name>.h, included by bpf/datapath.c),
//     writing the enrichment maps of bpf/maps.h;
//   - its Go package, internal/agent/feature/<name>, implementing Feature: its
//     name and docs, its hook (programs in order of preference, with their
//     fallbacks and load-time constants) and the record fields it fills
//     from the enrichment entry;
//   - its fields in the record model (pkg/flow: Record, JSON, protobuf);
//   - one line in internal/agent/feature/registry.
//
// The agent starts the hooks of the enabled features (--features), and the
// evictor calls Fill on each running feature for every flow that has an
// enrichment entry.
package feature

import (
	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Feature is one optional kernel measurement.
type Feature interface {
	// Name is the --features value and the hook metric label ("drops").
	Name() string
	// Doc says in one line what the feature adds to a flow.
	Doc() string
	// Plan prepares the feature for this kernel and returns its programs
	// and fallbacks. kernel is the running kernel's BTF, nil when it cannot
	// be read (the feature then uses its defaults). Called once, at start.
	Plan(kernel *btf.Spec) datapath.Plan
	// Fields are the JSON names of the record fields Fill sets.
	Fields() []string
	// Fill copies the feature's part of a flow's enrichment entry into r.
	Fill(r *flow.Record, v *datapath.EnrichValue)
}

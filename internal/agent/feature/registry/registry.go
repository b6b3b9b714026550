// Package registry is the only list of the agent's optional kernel features.
// Adding a feature is adding its packages (bpf/<name>.h,
// internal/agent/feature/<name>) and one line to New; --features (its
// usage, default and accepted names) and the features' own options reach
// the agent's configuration from here (init), and the CRD's enum (crdgen)
// and the record model's lists of groups (groupgen) are generated from
// here. conformance_test.go checks every feature has everything else it
// needs.
package registry

import (
	"fmt"

	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/internal/agent/feature/dns"
	"github.com/flowlens/flowlens/internal/agent/feature/drops"
	"github.com/flowlens/flowlens/internal/agent/feature/retransmits"
	"github.com/flowlens/flowlens/internal/agent/feature/rtt"
	"github.com/flowlens/flowlens/internal/agent/feature/tcp"
	"github.com/flowlens/flowlens/internal/agent/feature/tls"
	"github.com/flowlens/flowlens/internal/agent/feature/xlat"
)

// New returns a fresh instance of every feature, in the order --features
// lists them in its help.
func New() []feature.Feature {
	return []feature.Feature{
		drops.New(),
		rtt.New(),
		retransmits.New(),
		xlat.New(),
		tls.New(),
		dns.New(),
		tcp.New(),
	}
}

// init hands the features to the agent's configuration, which stays free
// of the kernel side (the operator links it) and so cannot import them.
func init() {
	var fs []config.Feature
	for _, f := range New() {
		c := f.Config()
		c.Name = f.Name()
		fs = append(fs, c)
	}
	config.SetFeatures(fs)
}

// Enabled returns the features a loaded configuration enables, in New's
// order, each configured from its options.
func Enabled(cfg *config.Config) ([]feature.Feature, error) {
	fs, err := Select(cfg.Features)
	if err != nil {
		return nil, err
	}
	for _, f := range fs {
		f.Configure(cfg)
	}
	return fs, nil
}

// Names are the names of every feature, in New's order.
func Names() []string {
	var out []string
	for _, f := range New() {
		out = append(out, f.Name())
	}
	return out
}

// Select returns new instances of the named features, in New's order.
func Select(names []string) ([]feature.Feature, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []feature.Feature
	for _, f := range New() {
		if want[f.Name()] {
			out = append(out, f)
			delete(want, f.Name())
		}
	}
	for n := range want {
		return nil, fmt.Errorf("unknown feature %q", n)
	}
	return out, nil
}

// Plans returns the kernel plans of the named features (every feature when none is
// named) for the running kernel: tests and tools that start hooks without
// an agent.
func Plans(names ...string) ([]datapath.Plan, error) {
	if len(names) == 0 {
		names = Names()
	}
	fs, err := Select(names)
	if err != nil {
		return nil, err
	}
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		kernel = nil // the features' defaults
	}
	out := make([]datapath.Plan, len(fs))
	for i, f := range fs {
		out[i] = f.Plan(kernel)
	}
	return out, nil
}

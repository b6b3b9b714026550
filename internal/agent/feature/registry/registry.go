// Package registry lists every optional kernel feature of the agent. Adding a
// feature is adding its packages (bpf/<name>.h, internal/agent/feature/<name>) and
// one line to New.
package registry

import (
	"fmt"

	"github.com/cilium/ebpf/btf"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/internal/agent/feature/dns"
	"github.com/flowlens/flowlens/internal/agent/feature/drops"
	"github.com/flowlens/flowlens/internal/agent/feature/retransmits"
	"github.com/flowlens/flowlens/internal/agent/feature/rtt"
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
	}
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

// Hooks returns the hooks of the named features (every feature when none is
// named) for the running kernel: tests and tools that start hooks without
// an agent.
func Hooks(names ...string) ([]datapath.Plan, error) {
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

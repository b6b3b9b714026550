// Package retransmits is the "retransmits" feature: TCP segments
// retransmitted, counted on the flow that carries them (local → remote of
// the retransmitting socket). Kernel side: bpf/retransmits.h.
package retransmits

import (
	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Feature records retransmits.
type Feature struct{ feature.NoOptions }

// New returns the feature.
func New() *Feature { return &Feature{} }

func (*Feature) Name() string { return "retransmits" }

func (*Feature) DocPage() string {
	return "README.md#enrichment-drops-rtt-retransmits-nat-translation-tls-dns"
}

func (*Feature) Config() config.Feature { return config.Feature{Default: true} }

func (*Feature) Doc() string { return "TCP retransmitted segments on the flow that carries them" }

func (*Feature) Plan(*btf.Spec) datapath.Plan {
	return datapath.Plan{Name: "retransmits", Candidates: []datapath.Candidate{
		{Program: "retransmit", Attach: datapath.Tracing}, // tp_btf/tcp_retransmit_skb
	}}
}

func (*Feature) Fields() []string { return []string{"retransmits"} }

func (*Feature) Fill(r *flow.Record, v *datapath.EnrichValue) { r.Retransmits = v.Retransmits }

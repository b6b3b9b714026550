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

// Plan: tp_btf/tcp_retransmit_skb. Where the tracepoint has an err
// argument it fires for attempts that sent nothing too; those are skipped
// (bpf/retransmits.h, retransmit_err_arg).
func (*Feature) Plan(kernel *btf.Spec) datapath.Plan {
	errArg := uint32(0)
	if tracepointArgs(kernel, "tcp_retransmit_skb") >= 3 {
		errArg = 1
	}
	return datapath.Plan{Name: "retransmits",
		Candidates: []datapath.Candidate{
			{Program: "retransmit", Attach: datapath.Tracing}, // tp_btf/tcp_retransmit_skb
		},
		Constants: map[string]any{"retransmit_err_arg": errArg},
	}
}

// tracepointArgs is the number of arguments of the kernel's tracepoint
// name (its btf_trace_ typedef, whose first parameter is the tracepoint's
// private data), 0 when the kernel's BTF does not describe it.
func tracepointArgs(kernel *btf.Spec, name string) int {
	var td *btf.Typedef
	if kernel == nil || kernel.TypeByName("btf_trace_"+name, &td) != nil {
		return 0
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return 0
	}
	fp, ok := ptr.Target.(*btf.FuncProto)
	if !ok || len(fp.Params) == 0 {
		return 0
	}
	return len(fp.Params) - 1
}

func (*Feature) Fields() []string { return []string{"retransmits"} }

func (*Feature) Fill(r *flow.Record, v *datapath.EnrichValue) { r.Retransmits = v.Retransmits }

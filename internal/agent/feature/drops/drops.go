// Package drops is the "drops" feature: packets the kernel drops
// (kfree_skb with a drop reason), counted on the flow of the dropped packet
// with the latest reason and, for TCP, the socket state and TCP flags.
// Kernel side: bpf/drops.h.
package drops

import (
	"strconv"

	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Feature records drop_packets, drop_bytes, drop_cause, drop_tcp_state and
// drop_tcp_flags. Plan reads the reason and state names from the kernel's
// BTF; until then (or without BTF) causes are numbers.
type Feature struct {
	feature.NoOptions
	names *Names
}

// New returns the feature.
func New() *Feature { return &Feature{} }

func (*Feature) Name() string { return "drops" }

func (*Feature) DocPage() string {
	return "README.md#enrichment-drops-rtt-retransmits-nat-translation-tls-dns"
}

func (*Feature) Config() config.Feature { return config.Feature{Default: true} }

func (*Feature) Doc() string {
	return "packets and bytes the kernel dropped, with the latest drop reason (and TCP state and flags)"
}

// Plan: tp_btf/kfree_skb, or the classic tracepoint where tp_btf is missing
// (it needs tracefs mounted at /sys/kernel/tracing). SKB_CONSUMED and
// NOT_SPECIFIED are not drops; their values differ between kernels, so they
// are read from the kernel's BTF and set as load-time constants.
func (f *Feature) Plan(kernel *btf.Spec) datapath.Plan {
	consumed, notSpecified := uint32(1), uint32(2)
	if kernel != nil {
		consumed = dropReasonValue(kernel, "SKB_CONSUMED", consumed)
		notSpecified = dropReasonValue(kernel, "SKB_DROP_REASON_NOT_SPECIFIED", notSpecified)
		f.names = loadNames(kernel)
	}
	return datapath.Plan{Name: "drops",
		Candidates: []datapath.Candidate{
			{Program: "drop_kfree_skb", Attach: datapath.Tracing},                         // tp_btf/kfree_skb
			{Program: "drop_tracepoint", Attach: datapath.Tracepoint("skb", "kfree_skb")}, // needs tracefs
		},
		Constants: map[string]any{"reason_consumed": consumed, "reason_not_specified": notSpecified},
	}
}

func (*Feature) Fields() []string {
	return []string{"drop_packets", "drop_bytes", "drop_cause", "drop_tcp_state", "drop_tcp_flags"}
}

func (f *Feature) Fill(r *flow.Record, v *datapath.EnrichValue) {
	r.DropPackets = v.DropPackets
	r.DropBytes = v.DropBytes
	r.DropTCPFlags = v.DropTcpFlags
	// A cause without drops in the period: the tcp feature's timeout of a
	// connect whose SYNs were dropped earlier carries their cause (bpf/tcp.h).
	if v.DropPackets == 0 && v.DropCause == 0 {
		return
	}
	if f.names != nil {
		r.DropCause = f.names.DropReason(v.DropCause)
		r.DropTCPState = f.names.TCPState(v.DropTcpState)
	} else {
		r.DropCause = strconv.FormatUint(uint64(v.DropCause), 10)
	}
}

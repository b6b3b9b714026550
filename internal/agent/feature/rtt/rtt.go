// Package rtt is the "rtt" feature: the smoothed RTT of TCP sockets, on the
// flow of the packets each socket receives (remote → local), the packets
// that carried the measurement. Kernel side: bpf/rtt.h.
package rtt

import (
	"time"

	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Feature records rtt_ns (latest smoothed RTT of the period) and rtt_max_ns.
type Feature struct{ feature.NoOptions }

// New returns the feature.
func New() *Feature { return &Feature{} }

func (*Feature) Name() string { return "rtt" }

func (*Feature) DocPage() string {
	return "README.md#enrichment-drops-rtt-retransmits-nat-translation-tls-dns"
}

func (*Feature) Config() config.Feature { return config.Feature{Default: true} }

func (*Feature) Doc() string {
	return "TCP smoothed RTT (latest and max of the period) on the flow of the received packets"
}

// Plan: fentry costs less than a tracepoint but is refused on some kernels;
// tp_btf/tcp_probe fires in the same place.
func (*Feature) Plan(*btf.Spec) datapath.Plan {
	return datapath.Plan{Name: "rtt", Candidates: []datapath.Candidate{
		{Program: "rtt_fentry", Attach: datapath.Tracing},    // fentry/tcp_rcv_established
		{Program: "rtt_tcp_probe", Attach: datapath.Tracing}, // tp_btf/tcp_probe
	}}
}

func (*Feature) Fields() []string { return []string{"rtt_ns", "rtt_max_ns"} }

func (*Feature) Fill(r *flow.Record, v *datapath.EnrichValue) {
	r.RTT = time.Duration(v.RttNs)
	r.RTTMax = time.Duration(v.RttMaxNs)
}

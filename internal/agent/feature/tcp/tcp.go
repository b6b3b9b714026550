// Package tcp is the "tcp" feature: TCP connection health per flow (what
// the flow's source did in the period: its role, connects and their
// outcome, SYN retransmissions, resets, zero windows, handshake latency).
// docs/tcp.md.
package tcp

import (
	"errors"

	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Feature records TCP connection health.
type Feature struct{ feature.NoOptions }

// New returns the feature.
func New() *Feature { return &Feature{} }

func (*Feature) Name() string { return "tcp" }

func (*Feature) DocPage() string { return "docs/tcp.md" }

func (*Feature) Config() config.Feature {
	return config.Feature{Brief: "TCP connects, refusals, timeouts, resets, zero windows"}
}

func (*Feature) Doc() string {
	return "TCP connection health: role, connects (refused, timed out), SYN retransmits, resets, zero windows, handshake latency"
}

// errNotBuilt: the record model comes first (issue #30), the kernel side next.
var errNotBuilt = errors.New("the tcp feature's kernel side is not built yet")

func (*Feature) Plan(*btf.Spec) datapath.Plan {
	return datapath.Plan{Name: "tcp", Err: errNotBuilt}
}

func (*Feature) Fields() []string {
	return []string{"tcp_role", "tcp_connects", "tcp_refused", "tcp_timeouts", "tcp_syn_retrans",
		"tcp_resets", "tcp_zero_windows", "tcp_handshake_ns", "tcp_handshake_max_ns"}
}

// Fill copies the flow's connection health (none yet: see Plan).
func (*Feature) Fill(*flow.Record, *datapath.EnrichValue) {}

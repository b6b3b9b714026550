package otlp

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/flowlens/flowlens/pkg/flow"
)

// A flow seen in a tunnel has the four flowlens.tunnel_* attributes, after
// frag_unmatched's place and before sampling, a tunnel flow's own record
// flowlens.overlay_outer too; a flow without one has none.
func TestTunnelAttributes(t *testing.T) {
	want := []string{"flowlens.tunnel_type", "flowlens.tunnel_src_addr", "flowlens.tunnel_dst_addr", "flowlens.tunnel_vni"}
	tunnelKeys := func(r *flow.Record) []string {
		e := newEncoder("node", "")
		e.attributes(r)
		var got []string
		for _, k := range attributeKeys(e.buf) {
			if slices.Contains(want, k) || k == "flowlens.sampling" {
				got = append(got, k)
			}
		}
		return got
	}
	r := flow.Record{Tunnel: flow.Tunnel{TunnelType: flow.TunnelGeneve, TunnelSrcAddr: netip.MustParseAddr("192.168.50.1"),
		TunnelDstAddr: netip.MustParseAddr("192.168.50.2"), TunnelVNI: 7}}
	if got := tunnelKeys(&r); !slices.Equal(got, append(slices.Clone(want), "flowlens.sampling")) {
		t.Errorf("tunnel attributes %v, want %v then flowlens.sampling", got, want)
	}
	r.Tunnel.OverlayOuter = true
	want = append(want, "flowlens.overlay_outer")
	if got := tunnelKeys(&r); !slices.Equal(got, append(slices.Clone(want), "flowlens.sampling")) {
		t.Errorf("tunnel flow's attributes %v, want %v then flowlens.sampling", got, want)
	}
	if got := tunnelKeys(&flow.Record{}); !slices.Equal(got, []string{"flowlens.sampling"}) {
		t.Errorf("a flow without a tunnel has %v", got)
	}
}

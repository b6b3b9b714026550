package textfmt

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

// observe's compact line shows a flow's tunnel, and marks a tunnel flow's
// own record (--overlay-outer-flows) overlay_outer.
func TestCompactTunnel(t *testing.T) {
	outer := netip.MustParseAddr
	f := enriched.Flow{Record: flow.Record{SrcAddr: outer("192.168.78.1"), DstAddr: outer("192.168.78.2"), SrcPort: 51000, DstPort: 4789,
		Proto: 17, Bytes: 38400, Packets: 200, EndTime: time.Unix(0, 0),
		Tunnel: flow.Tunnel{TunnelType: flow.TunnelVXLAN, TunnelSrcAddr: outer("192.168.78.1"), TunnelDstAddr: outer("192.168.78.2"), TunnelVNI: 42, OverlayOuter: true}}}
	for _, tc := range []struct {
		mod  func(*flow.Tunnel)
		want string
	}{
		{func(*flow.Tunnel) {}, " 200p tunnel=vxlan:192.168.78.1>192.168.78.2/vni=42 overlay_outer"},
		{func(t *flow.Tunnel) { t.OverlayOuter = false }, " 200p tunnel=vxlan:192.168.78.1>192.168.78.2/vni=42"},
		{func(t *flow.Tunnel) { t.TunnelType, t.TunnelVNI = flow.TunnelIPIP, 0 }, " 200p tunnel=ipip:192.168.78.1>192.168.78.2 overlay_outer"},
		{func(t *flow.Tunnel) { *t = flow.Tunnel{} }, " 200p"},
	} {
		g := f
		tc.mod(&g.Tunnel)
		if got := string(AppendCompact(nil, &g)); !strings.HasSuffix(got, tc.want) {
			t.Errorf("compact %q, want it to end with %q", got, tc.want)
		}
	}
}

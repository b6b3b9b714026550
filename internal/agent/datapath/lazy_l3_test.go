package datapath_test

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// Load verifies the Ethernet pair only; the L3 pair is loaded with the
// first device without a link-layer header (a tun here), once, and the
// shared set keeps it after that device goes: Programs() lists 2 TC
// programs, then 4, then 4 (in the fallback, cookie 0's 2 beside the tun
// namespace's 4, a set released with the tun's detach).
func TestL3PairLoadedWithFirstL3Device(t *testing.T) {
	netlab.Require(t)
	dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if got := tcNames(dp); len(got) != 2 || got[datapath.ProgramIngressL3] || got[datapath.ProgramEgressL3] {
		t.Fatalf("after Load, Programs() lists TC programs %v, want the Ethernet pair only", got)
	}
	ns := netlab.NewNetns(t, "l3lazy")
	c, err := ifaces.NetnsCookie(ns.Path)
	if err != nil {
		t.Fatal(err)
	}
	_, tun := netlab.Tun(t, ns, "tun0")
	ifc := ifaces.Interface{Name: "tun0", Index: tun.Attrs().Index, Netns: ns.Name, NetnsPath: ns.Path, NetnsCookie: c}
	for range 2 { // attach, detach, attach again: one L3 pair all along
		if err := dp.Attach(ifc); err != nil {
			t.Fatal(err)
		}
		want := 4
		if !dp.SharedPrograms() {
			want = 2 + 4
		}
		if got := tcNames(dp); len(got) != 4 || !got[datapath.ProgramIngressL3] || !got[datapath.ProgramEgressL3] ||
			tcPrograms(dp) != want {
			t.Fatalf("with a tun attached, Programs() lists %d TC programs %v, want %d, both pairs", tcPrograms(dp), got, want)
		}
		if err := dp.Detach(ifc); err != nil {
			t.Fatal(err)
		}
	}
}

// tcNames is the set of TC program names Programs() lists.
func tcNames(dp *datapath.Datapath) map[string]bool {
	out := map[string]bool{}
	for _, p := range dp.Programs() {
		if p.Attach == "tc_ingress" || p.Attach == "tc_egress" {
			out[p.Name] = true
		}
	}
	return out
}

package datapath_test

import (
	"runtime"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// ReleaseSpec drops the parsed object (the agent calls it after its hooks): the
// live heap shrinks by more than 0.5 MiB (the kept spec is ~1 MiB), and
// what needs the object later parses it again with the datapath's sizes
// and constants: the L3 pair at the first tun (loaded against the
// datapath's maps, which fails if a map's size differed), Spec, and
// LoadProgram.
func TestReleaseSpec(t *testing.T) {
	netlab.Require(t)
	dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	before := liveHeap()
	dp.ReleaseSpec()
	after := liveHeap()
	if !dp.SharedPrograms() {
		t.Logf("fallback (a set per namespace): the spec is kept")
	} else if before-after < 1<<19 {
		t.Fatalf("live heap %d bytes before ReleaseSpec, %d after: want more than 0.5 MiB released", before, after)
	}
	t.Logf("live heap %.2f MiB before ReleaseSpec, %.2f after", float64(before)/(1<<20), float64(after)/(1<<20))

	if got := dp.Spec().Maps["flows_a"].MaxEntries; got != 64 {
		t.Fatalf("Spec after ReleaseSpec: flows_a sized %d, want 64", got)
	}
	ns := netlab.NewNetns(t, "specrel")
	c, err := ifaces.NetnsCookie(ns.Path)
	if err != nil {
		t.Fatal(err)
	}
	_, tun := netlab.Tun(t, ns, "tun0")
	ifc := ifaces.Interface{Name: "tun0", Index: tun.Attrs().Index, Netns: ns.Name, NetnsPath: ns.Path, NetnsCookie: c}
	if err := dp.Attach(ifc); err != nil {
		t.Fatal(err)
	}
	if got := tcNames(dp); !got[datapath.ProgramIngressL3] || !got[datapath.ProgramEgressL3] {
		t.Fatalf("with a tun attached after ReleaseSpec, Programs() lists TC programs %v, want the L3 pair", got)
	}
	if err := dp.Detach(ifc); err != nil {
		t.Fatal(err)
	}
	p, err := dp.LoadProgram(datapath.ProgramIngress)
	if err != nil {
		t.Fatalf("LoadProgram after ReleaseSpec: %v", err)
	}
	p.Close()
}

// liveHeap is the heap's live bytes after two collections.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// What a load pays to parse the object again (after ReleaseSpec, and the
// L3 pair's at the first tun; docs/benchmarks.md §28).
func BenchmarkSpecParsedAgain(b *testing.B) {
	netlab.Require(b)
	dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer dp.Close()
	b.ReportAllocs()
	for b.Loop() {
		dp.Spec()
	}
}

package evictor

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Overflow records follow the kernel's dedup rule: the first (interface,
// direction) counts, the others are listed, a seventh is flagged.
func TestOverflowAggDedup(t *testing.T) {
	a := newOverflowAgg(0, &Stats{})
	key := datapath.FlowKey{SrcPort: 1, DstPort: 2, Proto: 17}
	obs := func(netns uint64, ifindex, dir uint32) datapath.IfaceObs {
		return datapath.IfaceObs{Netns: netns, Ifindex: ifindex, Dir: dir}
	}
	rec := func(o datapath.IfaceObs, ts uint64) *datapath.OverflowRec {
		return &datapath.OverflowRec{Key: key, Iface: o, Ts: ts, Bytes: 100, Packets: 1, TcpFlags: 0x10}
	}
	first := obs(1, 2, 2)
	for i := uint64(0); i < 5; i++ {
		a.add(rec(first, 10+i))        // counts
		a.add(rec(obs(2, 2, 1), 10+i)) // same ifindex, other netns: listed
		a.add(rec(obs(1, 2, 1), 10+i)) // first interface, other direction: listed as both
	}
	for i := uint32(3); i < 10; i++ {
		a.add(rec(obs(1, i, 1), 20)) // 4 more fit (6 in all), the rest are flagged
	}
	got := a.take()
	f := got.value(key)
	if f == nil || got.len() != 1 {
		t.Fatalf("%d flows, %v", got.len(), f)
	}
	v := *f
	if v.Packets != 5 || v.Bytes != 500 || v.FirstSeen != 10 || v.LastSeen != 14 || v.TcpFlags != 0x10 {
		t.Fatalf("counters %+v", v)
	}
	if v.N_ifaces != 6 || v.Ifaces[0].Dir != uint32(flow.DirBoth) || v.Ifaces[1] != obs(2, 2, 1) || v.Flags&datapath.FlowFlagIfacesOverflow == 0 {
		t.Fatalf("interfaces n=%d %+v flags=%d", v.N_ifaces, v.Ifaces, v.Flags)
	}
	if a.take().len() != 0 {
		t.Fatal("take did not start a new period")
	}
}

// A packet whose first hop falls into one drain and its second hop into the
// next is counted once: the next period inherits the counting observation
// (item 7 of issue #12). A hook the kernel classed as certainly first takes
// the counting over (a path change).
func TestOverflowAggAcrossDrainsAndPaths(t *testing.T) {
	a := newOverflowAgg(0, &Stats{})
	key := datapath.FlowKey{SrcPort: 1, DstPort: 2, Proto: 6}
	src1 := datapath.IfaceObs{Netns: 1, Ifindex: 2, Dir: datapath.DirEgress}
	src2 := datapath.IfaceObs{Netns: 1, Ifindex: 3, Dir: datapath.DirEgress}
	rtrIn := datapath.IfaceObs{Netns: 2, Ifindex: 2, Dir: datapath.DirIngress}
	fwd := datapath.IfaceObs{Netns: 2, Ifindex: 4, Dir: datapath.DirEgress}
	rec := func(o datapath.IfaceObs, order uint8) *datapath.OverflowRec {
		return &datapath.OverflowRec{Key: key, Iface: o, Order: order, Bytes: 1500, Packets: 2, Ts: 1}
	}
	// Period 1: two packets fully across (src1 -> rtrIn -> fwd), a third only at src1.
	for range 2 {
		a.add(rec(src1, datapath.OrderFirst))
		a.add(rec(rtrIn, datapath.OrderUnknown))
		a.add(rec(fwd, datapath.OrderUnknown))
	}
	a.add(rec(src1, datapath.OrderFirst))
	if v := *a.take().value(key); v.Packets != 6 || v.Bytes != 4500 || v.N_ifaces != 3 {
		t.Fatalf("period 1: %+v", v)
	}
	// Period 2: the third packet's later hops (already counted), then the
	// route changes to src2 for one packet.
	a.add(rec(rtrIn, datapath.OrderUnknown))
	a.add(rec(fwd, datapath.OrderUnknown))
	a.add(rec(src2, datapath.OrderFirst))
	a.add(rec(fwd, datapath.OrderUnknown))
	v := *a.take().value(key)
	if v.Packets != 2 || v.Bytes != 1500 {
		t.Fatalf("period 2 counted %d packets %d bytes, want 2 and 1500: %+v", v.Packets, v.Bytes, v)
	}
	if v.Ifaces[0] != src2 {
		t.Fatalf("counting observation %+v, want %+v", v.Ifaces[0], src2)
	}
	// Period 3: the route flaps back: src1 takes the counting over again.
	a.add(rec(src1, datapath.OrderFirst))
	a.add(rec(rtrIn, datapath.OrderUnknown))
	if v := *a.take().value(key); v.Packets != 2 || v.Ifaces[0] != src1 {
		t.Fatalf("period 3: %+v", v)
	}
}

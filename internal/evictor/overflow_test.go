package evictor

import (
	"testing"

	"github.com/flowlens/flowlens/internal/datapath"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Overflow records follow the kernel's dedup rule: the first (interface,
// direction) counts, the others are listed, a seventh is flagged.
func TestOverflowAggDedup(t *testing.T) {
	a := newOverflowAgg()
	key := datapath.FlowKey{SrcPort: 1, DstPort: 2, Proto: 17}
	obs := func(netns uint64, ifindex, dir uint32) datapath.IfaceObs {
		return datapath.IfaceObs{Netns: netns, Ifindex: ifindex, Dir: dir}
	}
	rec := func(o datapath.IfaceObs, ts uint64) *datapath.OverflowRec {
		return &datapath.OverflowRec{Key: key, Iface: o, TsNs: ts, Bytes: 100, TcpFlags: 0x10}
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
	f := got[key]
	if f == nil || len(got) != 1 {
		t.Fatalf("flows %v", got)
	}
	v := f.v
	if v.Packets != 5 || v.Bytes != 500 || v.FirstSeenNs != 10 || v.LastSeenNs != 14 || v.TcpFlags != 0x10 {
		t.Fatalf("counters %+v", v)
	}
	if v.N_ifaces != 6 || v.Ifaces[0].Dir != uint32(flow.DirBoth) || v.Ifaces[1] != obs(2, 2, 1) || v.Flags&datapath.FlowFlagIfacesOverflow == 0 {
		t.Fatalf("interfaces n=%d %+v flags=%d", v.N_ifaces, v.Ifaces, v.Flags)
	}
	if len(a.take()) != 0 {
		t.Fatal("take did not start a new period")
	}
}

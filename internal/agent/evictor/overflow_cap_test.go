package evictor

import (
	"runtime"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
)

// At its bound the overflow aggregation takes no new flow: the records of
// flows it holds still add up, those of new flows are dropped and their
// packets counted as lost, exactly, when they would have counted (a
// sighting the kernel counted elsewhere is not a lost packet). A new
// period starts with room again.
func TestOverflowAggCap(t *testing.T) {
	var s Stats
	a := newOverflowAgg(3, &s)
	in := datapath.IfaceObs{Netns: 1, Ifindex: 2, Dir: datapath.DirIngress}
	other := datapath.IfaceObs{Netns: 1, Ifindex: 3, Dir: datapath.DirEgress}
	rec := func(port uint16, order uint8, packets uint32) *datapath.OverflowRec {
		return &datapath.OverflowRec{Key: datapath.FlowKey{SrcPort: port, DstPort: 53, Proto: 17}, Iface: in,
			Was: other, Order: order, Bytes: 100 * packets, Packets: packets, Ts: 1}
	}
	for p := uint16(1); p <= 3; p++ { // fills it
		a.add(rec(p, datapath.OrderFirst, 1))
	}
	a.add(rec(4, datapath.OrderFirst, 2))     // lost: 2 packets
	a.add(rec(5, datapath.OrderUnknown, 3))   // lost: 3
	a.add(rec(6, datapath.OrderSplit, 4))     // lost: 4 (the kernel counted them)
	a.add(rec(7, datapath.OrderInherited, 5)) // dropped, but counted elsewhere: not lost
	a.add(rec(1, datapath.OrderFirst, 6))     // a flow it holds: added
	lost := &s.LostPackets[LostOverflowAggregationFull]
	drops := &s.LostRecords[LostOverflowAggregationFull]
	if lost.Load() != 9 || drops.Load() != 4 {
		t.Fatalf("lost packets %d records %d, want 9 and 4", lost.Load(), drops.Load())
	}
	got := a.take()
	if got.len() != 3 || got.value(rec(1, 0, 0).Key).Packets != 7 {
		t.Fatalf("took %d flows, flow 1 with %+v", got.len(), got.value(rec(1, 0, 0).Key))
	}
	// A new period: room for three again; the split records share the bound.
	a.add(rec(4, datapath.OrderFirst, 1))
	a.add(rec(5, datapath.OrderSplit, 1))
	a.add(rec(6, datapath.OrderSplit, 1))
	a.add(rec(7, datapath.OrderFirst, 1)) // lost
	// Flow 2 counted on other in the previous period (its packets were
	// inherited): an OrderUnknown sighting on in would not count there.
	e := a.last.entry(&rec(2, 0, 0).Key)
	e.ifaces[0], e.firstDir = other, uint8(other.Dir)
	a.add(rec(2, datapath.OrderUnknown, 1)) // dropped, not lost
	if lost.Load() != 10 || drops.Load() != 6 {
		t.Fatalf("lost packets %d records %d, want 10 and 6", lost.Load(), drops.Load())
	}
	if n, m := a.take().len(), len(a.takeSplit()); n != 1 || m != 2 {
		t.Fatalf("took %d flows and %d split ones, want 1 and 2", n, m)
	}
}

// OverflowEntryBytes is what one flow of the overflow aggregation costs
// at most in the heap, over two periods (the period's and the previous
// one's index and entries): the agent's memory budget divides by it
// (internal/agent/memory.go). Measured here, so that the bound follows the
// Go runtime's map layout.
func TestOverflowEntryBytes(t *testing.T) {
	const n = 200_000
	var s Stats
	a := newOverflowAgg(n, &s)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for period := range 3 {
		for i := range n {
			a.add(&datapath.OverflowRec{Key: datapath.FlowKey{SrcPort: uint16(i), DstPort: uint16(i >> 16), SrcIp: [16]byte{byte(period)}, Proto: 17},
				Packets: 1, Bytes: 60, Order: datapath.OrderFirst})
		}
		a.take()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(a)
	per := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
	t.Logf("%.0f bytes per flow (OverflowEntryBytes %d)", per, OverflowEntryBytes)
	if per > OverflowEntryBytes {
		t.Fatalf("%.0f bytes per flow, over OverflowEntryBytes (%d)", per, OverflowEntryBytes)
	}
	if s.LostRecords[LostOverflowAggregationFull].Load() != 0 {
		t.Fatal("dropped below the bound")
	}
}

// A new-flow flood into the aggregation: it holds exactly its bound of
// flows, asks for one eviction when it holds half of them (wake, once a
// period), and counts every record it refused and their packets, exactly;
// the flows it holds keep adding up. take hands on the flows and their
// packets, exactly, and the next period has room and asks again.
func TestOverflowAggBoundHolds(t *testing.T) {
	const max, flood = 1000, 5000
	var s Stats
	a := newOverflowAgg(max, &s)
	in := datapath.IfaceObs{Netns: 1, Ifindex: 2, Dir: datapath.DirIngress}
	rec := func(i int) *datapath.OverflowRec {
		return &datapath.OverflowRec{Key: datapath.FlowKey{SrcPort: uint16(i), DstPort: uint16(i >> 16), Proto: 17},
			Iface: in, Order: datapath.OrderFirst, Bytes: 60 * uint32(1+i%3), Packets: uint32(1 + i%3), Ts: uint64(i)}
	}
	woken := func() bool {
		select {
		case <-a.wake:
			return true
		default:
			return false
		}
	}
	var held, refused uint64
	for i := range flood {
		a.add(rec(i))
		if i < max {
			held += uint64(1 + i%3)
		} else {
			refused += uint64(1 + i%3)
		}
		if i == max/2-2 && woken() {
			t.Fatalf("asked for an eviction at %d flows, before half of %d", i+1, max)
		}
		if i == max/2-1 && !woken() {
			t.Fatalf("did not ask for an eviction at %d flows", i+1)
		}
	}
	if woken() {
		t.Fatal("asked for a second eviction in the same period")
	}
	for i := range max { // the flows it holds still add up
		a.add(rec(i))
	}
	lost, drops := s.LostPackets[LostOverflowAggregationFull].Load(), s.LostRecords[LostOverflowAggregationFull].Load()
	if drops != flood-max || lost != refused || refused != 8000 {
		t.Fatalf("refused %d records and %d packets, want %d and %d (8000)", drops, lost, flood-max, refused)
	}
	got := a.take()
	var packets, bytes uint64
	var v datapath.FlowValue
	for _, i := range got.idx {
		got.ents[i].load(&v)
		packets, bytes = packets+v.Packets, bytes+v.Bytes
	}
	if got.len() != max || packets != 2*held || bytes != 60*2*held {
		t.Fatalf("took %d flows, %d packets, %d bytes; want %d, %d and %d", got.len(), packets, bytes, max, 2*held, 60*2*held)
	}
	for i := range max / 2 {
		a.add(rec(flood + i))
	}
	if w := woken(); !w || a.flows.len() != max/2 || s.LostRecords[LostOverflowAggregationFull].Load() != drops {
		t.Fatalf("the next period: woken %v, %d flows, %d refused in all", w, a.flows.len(),
			s.LostRecords[LostOverflowAggregationFull].Load())
	}
}

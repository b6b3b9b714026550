package evictor

import (
	"sync"
	"sync/atomic"

	"github.com/flowlens/flowlens/internal/agent/datapath"
)

// overflowFlow aggregates the single-packet records the datapath sends
// through the ring buffer when the flow map is full, by the kernel's
// counting rule (bpf/flows.h, docs/design/counting.md): a packet
// counts on the hook the kernel classed as its first (OverflowRec.Order),
// not at all when the kernel found it counted before the flip (OrderInherited,
// on OverflowRec.Was), or else on the flow's counting observation: the
// first seen in this period, or the one the previous period counted on.
type overflowFlow struct {
	v datapath.FlowValue
}

// overflowAgg collects overflow records between two evictions. The
// previous period's flows stay for lookups (a packet counted before a
// drain is not counted again after it), as the kernel's previous
// generation does.
//
// It holds at most max flows (flows and split together, so the previous
// period's and the spare map are bounded by max too): a record of a flow
// it does not hold yet, once it is full, is dropped, and its packets, when
// the kernel's counting rule would have counted them there, are counted in
// lost (Stats.LostPackets, reason overflow_aggregation_full). Without the
// bound a new-flow flood with a slow exporter grows it without limit
// (docs/design/faults.md, "Memory under any traffic").
type overflowAgg struct {
	mu    sync.Mutex
	max   int
	lost  *atomic.Uint64 // packets dropped at max
	drops *atomic.Uint64 // records dropped at max
	flows map[datapath.FlowKey]*overflowFlow
	last  map[datapath.FlowKey]*overflowFlow // the period take returned last
	spare map[datapath.FlowKey]*overflowFlow
	// split holds the packets the kernel counted at their flow's counting
	// hook under another filter rule's sampling rate than the flow's
	// (OrderSplit): one record per flow and rule, so that each record's
	// packets x sampling stays unbiased. They count unconditionally (the
	// kernel decided), so they need no dedup and no previous period.
	split map[splitKey]*overflowFlow
}

// splitKey is a flow under one filter rule.
type splitKey struct {
	key  datapath.FlowKey
	rule uint8
}

// newOverflowAgg returns an aggregation of at most max flows (<= 0:
// DefaultOverflowMaxFlows) that counts what it drops in s.
func newOverflowAgg(max int, s *Stats) *overflowAgg {
	if max <= 0 {
		max = DefaultOverflowMaxFlows
	}
	return &overflowAgg{max: max, lost: &s.LostPackets[LostOverflowAggregationFull],
		drops: &s.LostRecords[LostOverflowAggregationFull], flows: map[datapath.FlowKey]*overflowFlow{},
		last: map[datapath.FlowKey]*overflowFlow{}, spare: map[datapath.FlowKey]*overflowFlow{},
		split: map[splitKey]*overflowFlow{}}
}

// addSplit adds an OrderSplit record.
func (a *overflowAgg) addSplit(r *datapath.OverflowRec) {
	sk := splitKey{r.Key, r.Rule}
	f, ok := a.split[sk]
	if !ok {
		if a.full() { // the kernel counted them here: lost
			a.drop(r, true)
			return
		}
		f = &overflowFlow{}
		v := &f.v
		v.FirstSeen, v.EthType, v.Dscp, v.SrcMac, v.DstMac = r.Ts, r.EthType, r.Dscp, r.SrcMac, r.DstMac
		v.Ifaces[0], v.FirstDir, v.N_ifaces, v.Rule = r.Iface, uint8(r.Iface.Dir), 1, r.Rule
		a.split[sk] = f
	}
	v := &f.v
	v.Bytes += uint64(r.Bytes)
	v.Packets += uint64(r.Packets)
	v.TcpFlags |= r.TcpFlags
	v.Flags |= r.Flags
	v.LastSeen = max(v.LastSeen, r.Ts)
}

// takeSplit returns the split records' flows and starts a new period. The
// returned map is the caller's.
func (a *overflowAgg) takeSplit() map[splitKey]*overflowFlow {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.split
	a.split = map[splitKey]*overflowFlow{}
	return out
}

func sameIface(a, b *datapath.IfaceObs) bool { return a.Netns == b.Netns && a.Ifindex == b.Ifindex }

// countingObs is v's counting observation, if it has one.
func countingObs(v *datapath.FlowValue) (datapath.IfaceObs, bool) {
	if v.N_ifaces == 0 || v.ListedOnly&1 != 0 {
		return datapath.IfaceObs{}, false
	}
	o := v.Ifaces[0]
	o.Dir = uint32(v.FirstDir)
	return o, true
}

func (a *overflowAgg) add(r *datapath.OverflowRec) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Order == datapath.OrderSplit {
		a.addSplit(r)
		return
	}
	me := r.Iface
	var prev *datapath.FlowValue
	if p, ok := a.last[r.Key]; ok {
		prev = &p.v
	}
	f, ok := a.flows[r.Key]
	if !ok {
		if a.full() {
			a.drop(r, newCounts(r, prev))
			return
		}
		f = &overflowFlow{}
		v := &f.v
		v.FirstSeen = r.Ts
		v.LastSeen = r.Ts
		v.EthType = r.EthType
		v.Dscp = r.Dscp
		v.SrcMac = r.SrcMac
		v.DstMac = r.DstMac
		v.Ifaces[0] = me
		v.FirstDir = uint8(me.Dir)
		v.N_ifaces = 1
		v.Rule = r.Rule
		if r.Order == datapath.OrderInherited { // the kernel's previous map counted it on Was
			v.Ifaces[0] = r.Was
			v.FirstDir = uint8(r.Was.Dir)
			v.Ifaces[1] = me
			v.N_ifaces = 2
		} else if r.Order == datapath.OrderUnknown && prev != nil && prev.Packets > 0 {
			if c, ok := countingObs(prev); ok && c != me { // inherit the counting observation
				v.Ifaces[0] = c
				v.FirstDir = uint8(c.Dir)
				v.Ifaces[1] = me
				v.N_ifaces = 2
			}
		}
		a.flows[r.Key] = f
	}
	v := &f.v

	var counts bool
	switch r.Order {
	case datapath.OrderFirst:
		counts = true
	case datapath.OrderInherited:
		counts = false
	default:
		c, ok := countingObs(v)
		counts = ok && c == me
	}

	// List the observation.
	j := -1
	for i := range ifaceCount(v) {
		if o := &v.Ifaces[i]; sameIface(o, &me) {
			j = i
			if o.Dir != me.Dir {
				o.Dir = datapath.DirBoth
			}
			break
		}
	}
	if j < 0 {
		if int(v.N_ifaces) < len(v.Ifaces) {
			j = int(v.N_ifaces)
			v.Ifaces[j] = me
			v.N_ifaces++
		} else {
			v.Flags |= datapath.FlowFlagIfacesOverflow
		}
	}
	v.Flags |= r.Flags
	if !counts {
		// Entry 0 while it counts (in its other direction) keeps its bit clear.
		if j > 0 || (j == 0 && v.ListedOnly&1 != 0) {
			v.ListedOnly |= 1 << j
		}
		return
	}
	v.Bytes += uint64(r.Bytes)
	v.Packets += uint64(r.Packets)
	v.TcpFlags |= r.TcpFlags
	v.LastSeen = max(v.LastSeen, r.Ts)
	if j > 0 { // hand over, as the kernel does
		v.Ifaces[0], v.Ifaces[j] = v.Ifaces[j], v.Ifaces[0]
	}
	if j >= 0 {
		v.FirstDir = uint8(me.Dir)
		v.ListedOnly &^= 1 | 1<<j
	}
}

// full reports whether the aggregation holds its maximum of flows.
func (a *overflowAgg) full() bool { return len(a.flows)+len(a.split) >= a.max }

// drop counts a record that found the aggregation full: its packets are
// lost if they would have counted.
func (a *overflowAgg) drop(r *datapath.OverflowRec, counts bool) {
	a.drops.Add(1)
	if counts {
		a.lost.Add(uint64(r.Packets))
	}
}

// newCounts reports whether r, the first record of its flow in this
// period, counts: what add decides for a new entry (prev is the flow in
// the previous period, if any).
func newCounts(r *datapath.OverflowRec, prev *datapath.FlowValue) bool {
	switch r.Order {
	case datapath.OrderFirst:
		return true
	case datapath.OrderInherited:
		return false
	}
	if prev != nil && prev.Packets > 0 {
		if c, ok := countingObs(prev); ok && c != r.Iface {
			return false
		}
	}
	return true
}

// take returns the aggregated flows and starts a new period. The returned
// map is valid until the next call (it is the next period's "previous").
func (a *overflowAgg) take() map[datapath.FlowKey]*overflowFlow {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.spare)
	out := a.flows
	a.flows, a.spare, a.last = a.spare, a.last, out
	return out
}

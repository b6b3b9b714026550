package evictor

import (
	"sync"
	"sync/atomic"

	"github.com/flowlens/flowlens/internal/agent/datapath"
)

// overflowFlow is a flow of the split records (overflowAgg.split, rare),
// as the kernel would have it. The other flows are overflowEntry.
type overflowFlow struct {
	v datapath.FlowValue
}

// overflowEntry is a flow of the overflow aggregation as it waits for the
// next eviction: a FlowValue without its lock and padding, the first two
// interfaces inline and the other four (rare: a flow crossing more than two
// hooks while the map is full) in more. 96 bytes against a FlowValue's 168
// behind a pointer: a new-flow flood's flows wait here.
type overflowEntry struct {
	firstSeen, lastSeen                              uint64
	bytes, packets                                   uint64
	ifaces                                           [2]datapath.IfaceObs
	more                                             *[len(datapath.FlowValue{}.Ifaces) - 2]datapath.IfaceObs
	ethType, tcpFlags                                uint16
	srcMac, dstMac                                   [6]uint8
	firstDir, listedOnly, nIfaces, flags, dscp, rule uint8
}

// load expands e into v.
func (e *overflowEntry) load(v *datapath.FlowValue) {
	*v = datapath.FlowValue{FirstSeen: e.firstSeen, LastSeen: e.lastSeen, Bytes: e.bytes, Packets: e.packets,
		EthType: e.ethType, TcpFlags: e.tcpFlags, SrcMac: e.srcMac, DstMac: e.dstMac, FirstDir: e.firstDir,
		ListedOnly: e.listedOnly, N_ifaces: e.nIfaces, Flags: e.flags, Dscp: e.dscp, Rule: e.rule}
	v.Ifaces[0], v.Ifaces[1] = e.ifaces[0], e.ifaces[1]
	if e.more != nil {
		copy(v.Ifaces[2:], e.more[:])
	}
}

// store keeps v in e.
func (e *overflowEntry) store(v *datapath.FlowValue) {
	more := e.more
	*e = overflowEntry{firstSeen: v.FirstSeen, lastSeen: v.LastSeen, bytes: v.Bytes, packets: v.Packets,
		ethType: v.EthType, tcpFlags: v.TcpFlags, srcMac: v.SrcMac, dstMac: v.DstMac, firstDir: v.FirstDir,
		listedOnly: v.ListedOnly, nIfaces: v.N_ifaces, flags: v.Flags, dscp: v.Dscp, rule: v.Rule,
		ifaces: [2]datapath.IfaceObs{v.Ifaces[0], v.Ifaces[1]}, more: more}
	if v.N_ifaces > 2 {
		if e.more == nil {
			e.more = new([len(datapath.FlowValue{}.Ifaces) - 2]datapath.IfaceObs)
		}
		copy(e.more[:], v.Ifaces[2:])
	}
}

// overflowPeriod is one period's flows: an index by key into a dense slice
// of entries, both reused from period to period.
type overflowPeriod struct {
	idx  map[datapath.FlowKey]int32
	ents []overflowEntry
}

func newOverflowPeriod() *overflowPeriod {
	return &overflowPeriod{idx: map[datapath.FlowKey]int32{}}
}

// len is the number of flows in p.
func (p *overflowPeriod) len() int { return len(p.ents) }

// entry is k's entry, or nil.
func (p *overflowPeriod) entry(k *datapath.FlowKey) *overflowEntry {
	if i, ok := p.idx[*k]; ok {
		return &p.ents[i]
	}
	return nil
}

// value is k's flow expanded (a copy), or nil (tests).
func (p *overflowPeriod) value(k datapath.FlowKey) *datapath.FlowValue {
	e := p.entry(&k)
	if e == nil {
		return nil
	}
	v := new(datapath.FlowValue)
	e.load(v)
	return v
}

// insert adds k with an empty entry and returns it.
func (p *overflowPeriod) insert(k *datapath.FlowKey) *overflowEntry {
	p.idx[*k] = int32(len(p.ents))
	p.ents = append(p.ents, overflowEntry{})
	return &p.ents[len(p.ents)-1]
}

// reset empties p for a new period. What a flood grew stays allocated
// only while the periods use at least a quarter of it: a map and slices
// four times larger than the last period needed are dropped.
func (p *overflowPeriod) reset(last int) {
	if n := cap(p.ents); n > 1024 && n > 4*last {
		p.idx, p.ents = map[datapath.FlowKey]int32{}, nil
		return
	}
	clear(p.idx)
	clear(p.ents) // the more arrays
	p.ents = p.ents[:0]
}

// overflowAgg collects overflow records between two evictions. The
// previous period's flows stay for lookups (a packet counted before a
// drain is not counted again after it), as the kernel's previous
// generation does.
//
// It holds at most max flows in a period (flows and split together; the
// previous period's are bounded by max too): a record of a flow it does
// not hold yet, once it is full, is dropped, and its packets, when the
// kernel's counting rule would have counted them there, are counted in
// lost (Stats.LostPackets, reason overflow_aggregation_full). Without the
// bound a new-flow flood with a slow exporter grows it without limit
// (docs/design/faults.md, "Memory under any traffic"). Once it holds half
// of max it asks for an eviction (wake), which hands its flows on and
// starts a new period: the bound is reached only when evictions cannot
// keep up.
type overflowAgg struct {
	mu    sync.Mutex
	max   int
	lost  *atomic.Uint64 // packets dropped at max
	drops *atomic.Uint64 // records dropped at max
	flows *overflowPeriod
	last  *overflowPeriod // the period take returned last
	// wake receives a value once the period holds half of max flows.
	wake  chan struct{}
	woken bool // this period has sent on wake
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
		drops: &s.LostRecords[LostOverflowAggregationFull], flows: newOverflowPeriod(), last: newOverflowPeriod(),
		wake: make(chan struct{}, 1), split: map[splitKey]*overflowFlow{}}
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
		a.grown()
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

// add aggregates r by the kernel's counting rule (bpf/flows.h,
// docs/design/counting.md): a packet counts on the hook the kernel classed
// as its first (OverflowRec.Order), not at all when the kernel found it
// counted before the flip (OrderInherited, on OverflowRec.Was), or else on
// the flow's counting observation: the first seen in this period, or the
// one the previous period counted on. The flow's entry is expanded into a
// FlowValue for the rule and stored back.
func (a *overflowAgg) add(r *datapath.OverflowRec) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Order == datapath.OrderSplit {
		a.addSplit(r)
		return
	}
	me := r.Iface
	var prev *datapath.FlowValue
	var pv, fv datapath.FlowValue
	e := a.flows.entry(&r.Key)
	if e == nil {
		if p := a.last.entry(&r.Key); p != nil {
			p.load(&pv)
			prev = &pv
		}
		if a.full() {
			a.drop(r, newCounts(r, prev))
			return
		}
		e = a.flows.insert(&r.Key)
		a.grown()
		v := &fv
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
	} else {
		e.load(&fv)
	}
	a.update(e, &fv, r, me)
}

// update adds r, a record of e's flow (expanded into v), to e.
func (a *overflowAgg) update(e *overflowEntry, v *datapath.FlowValue, r *datapath.OverflowRec, me datapath.IfaceObs) {
	defer e.store(v)
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
func (a *overflowAgg) full() bool { return a.flows.len()+len(a.split) >= a.max }

// grown asks for an eviction, once a period, when the period holds half of
// its maximum of flows.
func (a *overflowAgg) grown() {
	if !a.woken && 2*(a.flows.len()+len(a.split)) >= a.max {
		a.woken = true
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

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
// period is valid until the next call (it is the next period's "previous").
func (a *overflowAgg) take() *overflowPeriod {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.flows
	a.last.reset(out.len())
	a.flows, a.last = a.last, out
	a.woken = false
	return out
}

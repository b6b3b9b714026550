package main

import (
	"container/heap"
	"slices"
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// Defaults of the follow-mode merge.
const (
	// defaultReorderWindow is --reorder-window: how long a followed flow
	// waits at most for the other collectors.
	defaultReorderWindow = 2 * time.Second
	// reorderLimit is the most flows that wait: about 24 MiB, a decoded
	// HistoryFlow with two interfaces and Kubernetes context taking about
	// 1.5 KiB.
	reorderLimit = 16384
)

// merger puts the flows that several collectors stream in follow mode in
// end-time order, the key of the histories' merge, within a bounded window.
// No collector's stream is strictly in that order (a flow's end is its last
// packet, and agents evict on their own schedules), so it is a reorder
// buffer with a watermark per stream, the latest end time it delivered (its
// mark). A waiting flow is printed, earliest end
// first (ties: first arrived first), once
//
//   - every live stream's mark is at or after its end: they have caught up
//     with it (with a single stream, at once);
//   - or a flow that ended at or after it has waited the window since it
//     arrived: a quiet collector holds the others up by the window at most,
//     and the flows that ended before the overdue one still go before it;
//   - or it ended no later than a flow already printed: waiting can no
//     longer put it in order;
//   - or more than limit flows wait: the earliest goes early (counted in
//     early), so memory stays bounded and nothing is dropped.
//
// A stream that ends no longer holds the others. The merger reads no clock
// (time is given), so its tests are deterministic.
type merger struct {
	window time.Duration
	limit  int
	marks  []time.Time // per stream: the latest end time it delivered; zero: none yet
	ended  []bool      // per stream: finished
	byEnd  pendingHeap // the waiting flows, earliest end first
	// byArrival: the flows in arrival order, so in order of due time;
	// printed ones stay until they reach the front.
	byArrival []*pending
	seq       uint64
	upTo      time.Time // flows that ended at or before it may go at once
	early     uint64    // flows printed early because more than limit waited
}

// pending is a flow waiting in the merger.
type pending struct {
	f    *flowv1.HistoryFlow // nil once printed
	end  time.Time
	seq  uint64    // arrival order, for ties
	due  time.Time // arrival + window
	done bool      // printed
}

func newMerger(streams int, window time.Duration, limit int) *merger {
	return &merger{window: window, limit: max(limit, 1), marks: make([]time.Time, streams), ended: make([]bool, streams)}
}

// add takes a flow that stream delivered at now.
func (m *merger) add(stream int, f *flowv1.HistoryFlow, now time.Time) {
	p := &pending{f: f, end: f.GetFlow().GetEndTime().AsTime(), seq: m.seq, due: now.Add(m.window)}
	m.seq++
	if p.end.After(m.marks[stream]) {
		m.marks[stream] = p.end
	}
	heap.Push(&m.byEnd, p)
	// Printed flows stay in byArrival behind a waiting one: sweep them
	// when they could outnumber the waiting ones, so memory stays bounded
	// whatever the window.
	if len(m.byArrival) >= 2*m.limit {
		m.byArrival = slices.DeleteFunc(m.byArrival, func(p *pending) bool { return p.done })
	}
	m.byArrival = append(m.byArrival, p)
}

// end says that stream delivers no more flows.
func (m *merger) end(stream int) { m.ended[stream] = true }

// waiting is the number of flows that wait.
func (m *merger) waiting() int { return m.byEnd.Len() }

// next returns the next flow to print at now, if one may go.
func (m *merger) next(now time.Time) (*flowv1.HistoryFlow, bool) {
	// Overdue flows: they, and every flow that ended before them, go.
	for len(m.byArrival) > 0 {
		p := m.byArrival[0]
		if !p.done && p.due.After(now) {
			break
		}
		if !p.done && p.end.After(m.upTo) {
			m.upTo = p.end
		}
		m.byArrival[0] = nil
		m.byArrival = m.byArrival[1:]
	}
	if m.byEnd.Len() == 0 {
		return nil, false
	}
	p := m.byEnd[0]
	switch {
	case m.byEnd.Len() > m.limit:
		m.early++
	case !p.end.After(m.upTo), m.caughtUp(p.end):
	default:
		return nil, false
	}
	heap.Pop(&m.byEnd)
	if p.end.After(m.upTo) {
		m.upTo = p.end
	}
	f := p.f
	p.f, p.done = nil, true
	return f, true
}

// caughtUp says whether every live stream delivered a flow that ended at or
// after end.
func (m *merger) caughtUp(end time.Time) bool {
	for s, mark := range m.marks {
		if !m.ended[s] && mark.Before(end) {
			return false
		}
	}
	return true
}

// due is when the earliest-arrived waiting flow's wait is over, if a flow
// waits.
func (m *merger) due() (time.Time, bool) {
	for _, p := range m.byArrival {
		if !p.done {
			return p.due, true
		}
	}
	return time.Time{}, false
}

// rest returns every waiting flow, earliest end first (the end of the
// follow: nothing more comes to wait for).
func (m *merger) rest() []*flowv1.HistoryFlow {
	out := make([]*flowv1.HistoryFlow, 0, m.byEnd.Len())
	for m.byEnd.Len() > 0 {
		p := heap.Pop(&m.byEnd).(*pending)
		out = append(out, p.f)
		p.f, p.done = nil, true
	}
	m.byArrival = nil
	return out
}

// pendingHeap orders waiting flows by end time, then arrival
// (container/heap).
type pendingHeap []*pending

func (h pendingHeap) Len() int { return len(h) }
func (h pendingHeap) Less(i, j int) bool {
	if c := h[i].end.Compare(h[j].end); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h pendingHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)   { *h = append(*h, x.(*pending)) }
func (h *pendingHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return p
}

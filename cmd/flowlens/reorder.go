package main

import (
	"container/heap"
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The capture's reorder window: each packet is held this long after it
// arrives (from any collector), so that the packets of other nodes,
// interfaces and collectors seen earlier but arriving a little later are
// written before it. Held packets are bounded too: past reorderMaxHeld
// the earliest is written at once.
//
// Why a hold time and not a watermark per source (write a packet once
// every live collector has sent a later one): one collector's stream is
// not in time order itself (it interleaves nodes, and each node its
// rings of each namespace and direction), so a later packet from a
// collector does not promise that no earlier one follows; and an idle
// collector would hold everything until the capture ends.
const (
	reorderWindow  = time.Second
	reorderMaxHeld = 1 << 16
)

// reorder merges packets into time order within its window. Not safe for
// concurrent use: the capture's writer owns it.
type reorder struct {
	window  time.Duration
	maxHeld int
	byTime  heldHeap
	byArr   []*heldPacket // arrival order; entries already written are skipped
	seq     uint64
	last    int64 // time of the latest packet written
	started bool
	// late counts packets written after a later one (they arrived more
	// than the window after it): written anyway, out of order.
	late uint64
}

type heldPacket struct {
	p       *flowv1.CapturedPacket
	arrived time.Time
	seq     uint64
	written bool
}

func newReorder(window time.Duration, maxHeld int) *reorder {
	return &reorder{window: window, maxHeld: maxHeld}
}

// push holds p, arrived now.
func (r *reorder) push(p *flowv1.CapturedPacket, now time.Time) {
	r.seq++
	h := &heldPacket{p: p, arrived: now, seq: r.seq}
	heap.Push(&r.byTime, h)
	r.byArr = append(r.byArr, h)
}

// held is how many packets are held.
func (r *reorder) held() int { return r.byTime.Len() }

// due calls emit, in time order, with the packets whose hold is over at
// now: while the packet held longest has been held for the window (or
// more than maxHeld are held), the earliest packet is written. Every
// packet is so written at most the window after it arrived.
func (r *reorder) due(now time.Time, emit func(*flowv1.CapturedPacket) error) error {
	for r.byTime.Len() > 0 {
		r.skipWritten()
		if r.byTime.Len() <= r.maxHeld && now.Sub(r.byArr[0].arrived) < r.window {
			return nil
		}
		if err := r.pop(emit); err != nil {
			return err
		}
	}
	return nil
}

// next is when the packet held longest is due (ok false: none held).
func (r *reorder) next() (time.Time, bool) {
	r.skipWritten()
	if len(r.byArr) == 0 {
		return time.Time{}, false
	}
	return r.byArr[0].arrived.Add(r.window), true
}

// drain writes every held packet, in time order (the capture ended).
func (r *reorder) drain(emit func(*flowv1.CapturedPacket) error) error {
	for r.byTime.Len() > 0 {
		if err := r.pop(emit); err != nil {
			return err
		}
	}
	r.byArr = r.byArr[:0]
	return nil
}

func (r *reorder) pop(emit func(*flowv1.CapturedPacket) error) error {
	h := heap.Pop(&r.byTime).(*heldPacket)
	h.written = true
	if t := h.p.TimeUnixNano; r.started && t < r.last {
		r.late++
	} else {
		r.last, r.started = t, true
	}
	return emit(h.p)
}

func (r *reorder) skipWritten() {
	i := 0
	for i < len(r.byArr) && r.byArr[i].written {
		r.byArr[i] = nil
		i++
	}
	r.byArr = r.byArr[i:]
}

// heldHeap orders held packets by time, then by arrival (packets of one
// interface of one node, with equal times, keep their order).
type heldHeap []*heldPacket

func (h heldHeap) Len() int { return len(h) }
func (h heldHeap) Less(i, j int) bool {
	if a, b := h[i].p.TimeUnixNano, h[j].p.TimeUnixNano; a != b {
		return a < b
	}
	return h[i].seq < h[j].seq
}
func (h heldHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)   { *h = append(*h, x.(*heldPacket)) }
func (h *heldHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}

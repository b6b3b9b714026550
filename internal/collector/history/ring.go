// Package history is the collector's flow history: a bounded ring of the
// recent enriched flows (Ring: at most a number of flows, none older than a
// maximum age) and the gRPC FlowHistory service that answers `flowlens
// observe` from it, with follow mode and bounded per-follower buffers
// (Service). The query it answers is internal/shared/flowquery's, the flows
// it sends internal/shared/enriched's wire form.
//
//	h := history.NewService(history.Options{Size: 100000, MaxAge: time.Hour})
//	pl := &enrich.Pipeline{Resolver: r, Sink: h.Add}
//	srv, _ := receiver.New(pl.Handle, receiver.Options{})
//	h.Register(srv) // FlowHistory, its requests bounded before they are decoded
//	defer h.Close() // ends the followers before srv.Shutdown
//
// Ingestion never waits for a reader: Add holds the Service's lock only to
// store a batch and queue it for each follower, a query only to copy the
// ring's flow pointers (Snapshot); filtering happens outside the lock, for a
// follower in a goroutine of its own.
package history

import (
	"slices"
	"time"

	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// entry is one flow and when the collector received it (max age counts
// from there: agents' clocks need not agree with the collector's).
type entry struct {
	f  *enriched.Flow
	at time.Time
}

// Ring holds the latest flows: at most its size, none received longer ago
// than its maximum age. Flows are kept by pointer: the pipeline hands each
// batch over in a fresh slice and never writes it again, so a flow in the
// ring is immutable. It is not safe for concurrent use (Service locks it).
type Ring struct {
	buf    []entry
	head   int // index of the oldest entry
	n      int
	maxAge time.Duration // 0: no age limit
}

// NewRing returns a ring of size flows (at least 1) with a maximum age
// (0: none).
func NewRing(size int, maxAge time.Duration) *Ring {
	return &Ring{buf: make([]entry, max(size, 1)), maxAge: maxAge}
}

// Len is the number of flows held (some may be past the maximum age until
// the next Add or Expire).
func (r *Ring) Len() int { return r.n }

// Add appends flows received at now, overwriting the oldest when full, and
// expires the flows older than the maximum age.
func (r *Ring) Add(flows []enriched.Flow, now time.Time) {
	for i := range flows {
		e := entry{f: &flows[i], at: now}
		if r.n < len(r.buf) {
			r.buf[(r.head+r.n)%len(r.buf)] = e
			r.n++
			continue
		}
		r.buf[r.head] = e
		r.head = (r.head + 1) % len(r.buf)
	}
	r.Expire(now)
}

// Expire drops the flows received before now minus the maximum age.
func (r *Ring) Expire(now time.Time) {
	if r.maxAge <= 0 {
		return
	}
	cutoff := now.Add(-r.maxAge)
	for r.n > 0 && r.buf[r.head].at.Before(cutoff) {
		r.buf[r.head] = entry{} // let the flow go
		r.head = (r.head + 1) % len(r.buf)
		r.n--
	}
}

// Snapshot appends the flows held to dst, oldest received first: pointer
// copies only, so that a query filters them without the lock.
func (r *Ring) Snapshot(dst []*enriched.Flow) []*enriched.Flow {
	dst = slices.Grow(dst, r.n)
	first := r.buf[r.head:min(r.head+r.n, len(r.buf))]
	for i := range first {
		dst = append(dst, first[i].f)
	}
	for i := range r.n - len(first) {
		dst = append(dst, r.buf[i].f)
	}
	return dst
}

// Each calls fn for every flow held, oldest received first.
func (r *Ring) Each(fn func(*enriched.Flow)) {
	for i := 0; i < r.n; i++ {
		fn(r.buf[(r.head+i)%len(r.buf)].f)
	}
}

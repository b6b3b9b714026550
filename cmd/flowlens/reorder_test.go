package main

import (
	"testing"
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The reorder window, on a given clock: a packet is held until the one
// held longest has waited the window, then the earliest held are written
// in time order; a packet arriving after a later one was written is
// written anyway, counted late; past maxHeld the earliest goes at once.
func TestReorderWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var got []int64
	emit := func(p *flowv1.CapturedPacket) error { got = append(got, p.TimeUnixNano); return nil }
	pk := func(ts int64) *flowv1.CapturedPacket { return &flowv1.CapturedPacket{TimeUnixNano: ts} }
	r := newReorder(time.Second, 4)

	// Node b's packet 30 arrives before node a's 10 and 20: written in
	// time order once the first arrival has waited 1 s.
	r.push(pk(30), t0)
	r.push(pk(10), t0.Add(100*time.Millisecond))
	r.push(pk(20), t0.Add(200*time.Millisecond))
	if next, ok := r.next(); !ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("next due %v %v, want %v", next, ok, t0.Add(time.Second))
	}
	if r.due(t0.Add(999*time.Millisecond), emit); len(got) != 0 {
		t.Fatalf("written before the window: %v", got)
	}
	// At 1 s the first arrival (30) is due: 10, 20 and 30 go, in order.
	r.due(t0.Add(time.Second), emit)
	if want := []int64{10, 20, 30}; !equal(got, want) || r.held() != 0 {
		t.Fatalf("written %v, held %d; want %v, 0", got, r.held(), want)
	}
	// A packet older than one written: still written, counted late.
	r.push(pk(25), t0.Add(2*time.Second))
	r.push(pk(40), t0.Add(2*time.Second))
	r.due(t0.Add(3*time.Second), emit)
	if want := []int64{10, 20, 30, 25, 40}; !equal(got, want) || r.late != 1 {
		t.Fatalf("written %v, late %d; want %v, 1", got, r.late, want)
	}
	// More than maxHeld (4) held: the earliest go at once.
	got = nil
	for i, ts := range []int64{55, 51, 53, 52, 54, 50} {
		r.push(pk(ts), t0.Add(4*time.Second+time.Duration(i)))
		r.due(t0.Add(4*time.Second+time.Duration(i)), emit)
	}
	if want := []int64{51, 50}; !equal(got, want) || r.held() != 4 || r.late != 2 {
		t.Fatalf("written %v, held %d, late %d; want %v, 4, 2", got, r.held(), r.late, want)
	}
	r.drain(emit)
	if want := []int64{51, 50, 52, 53, 54, 55}; !equal(got, want) || r.held() != 0 {
		t.Fatalf("drained %v, want %v", got, want)
	}
	if _, ok := r.next(); ok {
		t.Error("next due with nothing held")
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

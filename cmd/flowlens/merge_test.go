package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// fl is a followed flow named by its src port, ending at t0 + end seconds.
func fl(name uint32, end float64) *flowv1.HistoryFlow {
	return &flowv1.HistoryFlow{Flow: &flowv1.Flow{SrcPort: name,
		EndTime: timestamppb.New(t0.Add(time.Duration(end * float64(time.Second))))}}
}

// mergeRun drives a merger on a clock of its own: at(s) sets the time to t0
// + s seconds, add and end feed it, out is what it prints then.
type mergeRun struct {
	t   *testing.T
	m   *merger
	now time.Time
}

func newMergeRun(t *testing.T, streams int, window time.Duration, limit int) *mergeRun {
	return &mergeRun{t: t, m: newMerger(streams, window, limit), now: t0}
}

func (r *mergeRun) at(s float64) *mergeRun {
	r.now = t0.Add(time.Duration(s * float64(time.Second)))
	return r
}

func (r *mergeRun) add(stream int, flows ...*flowv1.HistoryFlow) *mergeRun {
	for _, f := range flows {
		r.m.add(stream, f, r.now)
	}
	return r
}

// out checks what may be printed now, by name, in order.
func (r *mergeRun) out(want string) {
	r.t.Helper()
	var got []string
	for f, ok := r.m.next(r.now); ok; f, ok = r.m.next(r.now) {
		got = append(got, fmt.Sprint(f.Flow.SrcPort))
	}
	if g := strings.Join(got, " "); g != want {
		r.t.Errorf("at %v: printed %q, want %q", r.now.Sub(t0), g, want)
	}
}

// A flow waits until every stream has delivered one that ended at or after
// it; then they come out by end time, whatever the order they arrived in,
// within a stream too.
func TestMergeWatermark(t *testing.T) {
	r := newMergeRun(t, 2, time.Minute, 100)
	r.add(0, fl(5, 5), fl(1, 1), fl(3, 3)).out("") // stream 1 delivered nothing yet
	r.add(1, fl(2, 2)).out("1 2")                  // stream 1 is at 2
	r.add(1, fl(6, 6)).out("3 5")                  // at 6; stream 0 is at 5
	r.add(0, fl(7, 7)).out("6")
	r.add(0, fl(4, 4)).out("4") // ended before 6, already printed: at once
	if n := r.m.waiting(); n != 1 {
		t.Errorf("%d flows wait, want 1 (7)", n)
	}
	if r.m.early != 0 {
		t.Errorf("early %d", r.m.early)
	}
}

// One stream: every flow at once (no one to wait for).
func TestMergeOneStream(t *testing.T) {
	r := newMergeRun(t, 1, time.Minute, 100)
	r.add(0, fl(3, 3)).out("3")
	r.add(0, fl(1, 1), fl(2, 2)).out("1 2") // a batch together: sorted
	r.add(0, fl(4, 4)).out("4")
}

// Equal end times: first arrived, first printed.
func TestMergeTies(t *testing.T) {
	r := newMergeRun(t, 2, time.Minute, 100)
	r.add(1, fl(20, 2)).add(0, fl(10, 2), fl(11, 2)).add(1, fl(21, 2)).out("20 10 11 21")
}

// A quiet stream holds a flow for the window at most, counted from the
// flow's arrival; the flows that ended before an overdue one go with it,
// those after it keep waiting.
func TestMergeWindow(t *testing.T) {
	r := newMergeRun(t, 2, time.Second, 100)
	r.at(0).add(0, fl(3, 3), fl(9, 9)).out("")
	r.at(0.5).add(0, fl(5, 5)).out("")
	if due, ok := r.m.due(); !ok || !due.Equal(t0.Add(time.Second)) {
		t.Errorf("due %v %v, want t0+1s", due, ok)
	}
	r.at(0.999).out("")
	r.at(1).out("3 5 9") // 9 arrived at 0 (overdue), 5 ended before it
	r.at(1).add(0, fl(4, 4)).out("4")
	r.at(1.2).add(0, fl(12, 12)).out("")
	r.at(1.6).add(0, fl(10, 10)).out("")
	r.at(2.2).out("10 12") // 12's wait is over; 10 ended before
	if _, ok := r.m.due(); ok {
		t.Error("nothing waits, yet a due time")
	}

	// Window 0: nothing waits.
	r = newMergeRun(t, 2, 0, 100)
	r.add(0, fl(2, 2), fl(1, 1)).out("1 2")
}

// A stream that ended holds nothing; once all have ended, everything goes.
func TestMergeEnd(t *testing.T) {
	r := newMergeRun(t, 3, time.Minute, 100)
	r.add(0, fl(4, 4), fl(2, 2)).add(1, fl(3, 3)).out("")
	r.m.end(2)
	r.out("2 3")
	r.m.end(1)
	r.out("4")
	r.add(0, fl(5, 5)).out("5")
}

// More than limit flows waiting: the earliest is printed early, counted,
// and the rest still come out in order.
func TestMergeLimit(t *testing.T) {
	r := newMergeRun(t, 2, time.Minute, 3)
	r.add(0, fl(4, 4), fl(3, 3), fl(2, 2)).out("")
	r.add(0, fl(1, 1)).out("1")
	r.add(0, fl(6, 6), fl(5, 5)).out("2 3")
	if r.m.early != 3 || r.m.waiting() != 3 {
		t.Errorf("early %d, waiting %d; want 3 and 3", r.m.early, r.m.waiting())
	}
	var rest []string
	for _, f := range r.m.rest() {
		rest = append(rest, fmt.Sprint(f.Flow.SrcPort))
	}
	if got := strings.Join(rest, " "); got != "4 5 6" {
		t.Errorf("rest %q, want 4 5 6", got)
	}
	if r.m.waiting() != 0 {
		t.Errorf("waiting %d after rest", r.m.waiting())
	}
}

// Memory stays bounded by the limit whatever the window: the printed flows
// behind a waiting one are swept from the arrival queue.
func TestMergeBounded(t *testing.T) {
	const limit = 8
	r := newMergeRun(t, 2, time.Hour, limit)
	r.add(0, fl(1000000, 1e6)).out("") // waits an hour for stream 1
	for i := range 10000 {
		r.add(0, fl(uint32(i), float64(i)))
		for _, ok := r.m.next(r.now); ok; _, ok = r.m.next(r.now) {
		}
		if r.m.waiting() > limit || len(r.m.byArrival) > 2*limit+1 {
			t.Fatalf("after %d flows: %d wait, %d in the arrival queue; limit %d", i+1, r.m.waiting(), len(r.m.byArrival), limit)
		}
	}
	if r.m.early != 10000+1-limit {
		t.Errorf("early %d, want %d", r.m.early, 10000+1-limit)
	}
}

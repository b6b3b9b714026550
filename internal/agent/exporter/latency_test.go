package exporter

import (
	"testing"
	"time"
)

// TestLatencyCountsAdd checks that durations gathered in a LatencyCounts
// and added at once read as the same histogram as observed one by one.
func TestLatencyCountsAdd(t *testing.T) {
	var direct, batched Latency
	var c LatencyCounts
	for _, d := range []time.Duration{0, -time.Millisecond, 500 * time.Microsecond, time.Millisecond,
		3 * time.Millisecond, 70 * time.Millisecond, 2 * time.Second, time.Minute} {
		direct.Observe(d)
		c.Observe(d)
	}
	batched.Add(&c)
	batched.Add(&LatencyCounts{}) // adds nothing
	n1, s1, b1 := direct.Snapshot()
	n2, s2, b2 := batched.Snapshot()
	if n1 != 8 || n2 != n1 || s2 != s1 {
		t.Fatalf("batched count %d sum %g, direct %d %g (want 8 observations)", n2, s2, n1, s1)
	}
	for ub, n := range b1 {
		if b2[ub] != n {
			t.Errorf("bucket ≤ %g: batched %d, direct %d", ub, b2[ub], n)
		}
	}
	if b1[.001] != 4 || b1[.005] != 5 || b1[30] != 7 {
		t.Errorf("buckets %v: want 4 ≤ 1 ms, 5 ≤ 5 ms, 7 ≤ 30 s", b1)
	}
}

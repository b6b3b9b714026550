package history

import (
	"net/netip"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// flowsN returns n flows with source ports from first on.
func flowsN(first, n int) []enriched.Flow {
	out := make([]enriched.Flow, n)
	for i := range out {
		out[i].SrcAddr = netip.MustParseAddr("10.0.0.1")
		out[i].DstAddr = netip.MustParseAddr("10.0.0.2")
		out[i].SrcPort = uint16(first + i)
		out[i].Proto = 17
	}
	return out
}

func ports(r *Ring) []int {
	var out []int
	r.Each(func(f *enriched.Flow) { out = append(out, int(f.SrcPort)) })
	return out
}

func equalInts(a, b []int) bool {
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

// The ring keeps the latest size flows, oldest first, across wrap-arounds
// and batches larger than itself.
func TestRingBound(t *testing.T) {
	r := NewRing(4, 0)
	t0 := time.Unix(1000, 0)
	r.Add(flowsN(1, 3), t0)
	if got := ports(r); !equalInts(got, []int{1, 2, 3}) {
		t.Fatalf("after 3: %v", got)
	}
	r.Add(flowsN(4, 3), t0)
	if got := ports(r); !equalInts(got, []int{3, 4, 5, 6}) {
		t.Fatalf("after 6: %v", got)
	}
	r.Add(flowsN(7, 10), t0)
	if got := ports(r); !equalInts(got, []int{13, 14, 15, 16}) {
		t.Fatalf("after a batch of 10: %v", got)
	}
	if r.Len() != 4 {
		t.Fatalf("Len %d", r.Len())
	}
}

// Flows leave the ring once older than the maximum age, counted from when
// they were received, whatever room is left.
func TestRingMaxAge(t *testing.T) {
	r := NewRing(100, time.Minute)
	t0 := time.Unix(1000, 0)
	r.Add(flowsN(1, 2), t0)
	r.Add(flowsN(3, 2), t0.Add(30*time.Second))
	r.Expire(t0.Add(time.Minute)) // exactly the maximum age: kept
	if got := ports(r); !equalInts(got, []int{1, 2, 3, 4}) {
		t.Fatalf("at 1m: %v", got)
	}
	r.Expire(t0.Add(time.Minute + time.Nanosecond))
	if got := ports(r); !equalInts(got, []int{3, 4}) {
		t.Fatalf("after 1m: %v", got)
	}
	r.Add(flowsN(5, 1), t0.Add(2*time.Minute))
	if got := ports(r); !equalInts(got, []int{5}) {
		t.Fatalf("after 2m: %v", got)
	}
	r.Expire(t0.Add(time.Hour))
	if r.Len() != 0 {
		t.Fatalf("Len %d after an hour", r.Len())
	}
}

package flow

import (
	"math/rand/v2"
	"testing"
	"time"
)

// appendTime must write exactly what time.RFC3339Nano writes, for any
// instant and zone (it converts to UTC first, as AppendJSON did).
func TestAppendTimeMatchesRFC3339Nano(t *testing.T) {
	east := time.FixedZone("east", 5*3600+1800)
	cases := []time.Time{
		{},
		time.Unix(0, 0),
		time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 22, 4, 0, 1, 5, time.UTC),
		time.Date(2026, 11, 22, 4, 0, 1, 100_000_000, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999_999_999, east),
		time.Date(9999, 12, 31, 23, 59, 59, 1, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		cases = append(cases, time.Unix(rng.Int64N(300_000_000_000)-62_000_000_000, rng.Int64N(1e9)).In(east))
	}
	for _, tm := range cases {
		want := tm.UTC().AppendFormat(nil, time.RFC3339Nano)
		if got := appendTime(nil, tm); string(got) != string(want) {
			t.Fatalf("appendTime(%v) = %s, want %s", tm, got, want)
		}
	}
}

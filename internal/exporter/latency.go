package exporter

import (
	"sync/atomic"
	"time"
)

// LatencyBuckets are the upper bounds, in seconds, of Latency's buckets.
var LatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Latency is a histogram of durations (LatencyBuckets), safe for
// concurrent use without locks or allocations, for an exporter's hot path;
// internal/metrics reads it at scrape time.
type Latency struct {
	counts [15]atomic.Uint64 // per bucket, the last one +Inf
	sumNs  atomic.Uint64
}

// Observe adds one duration.
func (l *Latency) Observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(LatencyBuckets) && s > LatencyBuckets[i] {
		i++
	}
	l.counts[i].Add(1)
	if d > 0 {
		l.sumNs.Add(uint64(d))
	}
}

// Snapshot returns the count, the sum in seconds and the cumulative count
// per bucket upper bound, as a Prometheus histogram wants them.
func (l *Latency) Snapshot() (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(LatencyBuckets))
	for i, ub := range LatencyBuckets {
		count += l.counts[i].Load()
		buckets[ub] = count
	}
	count += l.counts[len(LatencyBuckets)].Load()
	return count, float64(l.sumNs.Load()) / 1e9, buckets
}

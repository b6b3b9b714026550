package exporter

import (
	"sync/atomic"
	"time"
)

// LatencyBuckets are the upper bounds, in seconds, of Latency's buckets.
var LatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Latency is a histogram of durations (LatencyBuckets), safe for
// concurrent use without locks or allocations, for an exporter's hot path;
// internal/agent/metrics reads it at scrape time.
type Latency struct {
	counts [15]atomic.Uint64 // per bucket, the last one +Inf
	sumNs  atomic.Uint64
}

// Observe adds one duration.
func (l *Latency) Observe(d time.Duration) {
	l.counts[latencyBucket(d)].Add(1)
	if d > 0 {
		l.sumNs.Add(uint64(d))
	}
}

// Add adds what c gathered.
func (l *Latency) Add(c *LatencyCounts) {
	for i, n := range c.counts {
		if n > 0 {
			l.counts[i].Add(n)
		}
	}
	l.sumNs.Add(c.sumNs)
}

// LatencyCounts gathers durations for a Latency in plain fields, for one
// goroutine (or callers that are serialized) to add at once: no atomic
// operation per duration.
type LatencyCounts struct {
	counts [15]uint64
	sumNs  uint64
}

// Observe adds one duration.
func (c *LatencyCounts) Observe(d time.Duration) {
	c.counts[latencyBucket(d)]++
	if d > 0 {
		c.sumNs += uint64(d)
	}
}

// latencyBucket is the index of d's bucket in Latency.counts.
func latencyBucket(d time.Duration) int {
	s := d.Seconds()
	i := 0
	for i < len(LatencyBuckets) && s > LatencyBuckets[i] {
		i++
	}
	return i
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

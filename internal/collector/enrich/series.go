package enrich

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The flow metrics' series are bounded twice: a series no flow updated for
// MetricsOptions.SeriesTTL is deleted (a workload, a pod, a node that is
// gone stops being exported), and a metric holds at most
// MetricsOptions.MaxSeries series: past the cap, a flow that would create
// one is counted in the metric's overflow series (every label
// SeriesOverflow; a gauge's value is dropped instead) and in
// flowlens_collector_metric_series_limited_total{metric}. Senders choose
// some label values (the node of the sampling gauge, drop causes), and the
// cluster the others: neither can grow the collector's memory or the
// scrape without bound.
const (
	MetricSeriesLimited = Prefix + "metric_series_limited_total"
	MetricSeriesExpired = Prefix + "metric_series_expired_total"

	// SeriesOverflow is every label value of a metric's overflow series.
	// No Kubernetes name can be it (an underscore), so it never mixes with
	// a namespace, a workload or a node.
	SeriesOverflow = "_overflow"

	// DefaultSeriesTTL is --metrics-series-ttl's default: long enough for
	// a workload that talks every few minutes (a CronJob every 5) to keep
	// its series, short enough that a day of Job runs or pod restarts
	// with --pod-labels does not pile up.
	DefaultSeriesTTL = 10 * time.Minute
	// DefaultMaxSeries is --metrics-max-series's default: the series one
	// flow metric may hold. Workload pairs of a large cluster fit; pod
	// pairs (--pod-labels) may need more.
	DefaultMaxSeries = 20000
)

// seriesTracker is what Metrics knows of its bounded vectors: it expires
// them and counts what the cap refused.
type seriesTracker interface {
	expire(now int64, ttl time.Duration) int
	metricName() string
}

// bounded is one flow metric's vector (a CounterVec, HistogramVec or
// GaugeVec: M is its Counter, Observer or Gauge) with the series it holds,
// when each was last updated, and its cap.
type bounded[M any] struct {
	name string
	vec  interface {
		GetMetricWithLabelValues(lvs ...string) (M, error)
		DeleteLabelValues(lvs ...string) bool
	}
	max      int  // series at most, the overflow series apart; 0: no cap
	overflow bool // past the cap, update the overflow series (a gauge: drop)
	limited  prometheus.Counter
	expired  prometheus.Counter

	// mu: a read lock finds a series and updates it, so that expiry (the
	// write lock) never deletes a series between its lookup and its
	// update, which would lose that update.
	mu     sync.RWMutex
	series map[string]*seriesEntry[M]
	over   *seriesEntry[M] // the overflow series, once used
	nLabel int
}

type seriesEntry[M any] struct {
	m    M
	lv   []string
	seen atomic.Int64 // Unix nanoseconds of the batch that last updated it
}

func (e *seriesEntry[M]) touch(now int64) {
	if e.seen.Load() != now {
		e.seen.Store(now)
	}
}

func (b *bounded[M]) metricName() string { return b.name }

// keyBuf is the stack buffer a series key is built in: label values
// joined by 0xff, a byte no UTF-8 text holds.
const keyBuf = 192

func appendKey(b []byte, lv []string) []byte {
	for i, v := range lv {
		if i > 0 {
			b = append(b, 0xff)
		}
		b = append(b, v...)
	}
	return b
}

// update applies do(metric, v) to the series of label values lv, creating
// it (or, past the cap, using the overflow series) when needed. now is the
// batch's time.
func (b *bounded[M]) update(now int64, do func(M, float64), v float64, lv ...string) {
	var buf [keyBuf]byte
	key := appendKey(buf[:0], lv)
	b.mu.RLock()
	e := b.series[string(key)]
	full := e == nil && b.max > 0 && len(b.series) >= b.max
	if full && (b.over != nil || !b.overflow) {
		// Past the cap with the overflow series in place (or a gauge's
		// value to drop): no write lock, so that flows past the cap do
		// not serialize the ingest path.
		b.limited.Inc()
		e = b.over
	}
	if e != nil {
		e.touch(now)
		do(e.m, v)
	}
	done := e != nil || full && !b.overflow
	b.mu.RUnlock()
	if done {
		return
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	e = b.series[string(key)]
	if e == nil {
		if b.max > 0 && len(b.series) >= b.max {
			b.limited.Inc()
			if !b.overflow {
				return
			}
			if b.over == nil {
				lv := make([]string, b.nLabel)
				for i := range lv {
					lv[i] = SeriesOverflow
				}
				b.over = b.newEntry(lv)
			}
			e = b.over
		} else {
			e = b.newEntry(append([]string(nil), lv...))
			b.series[string(key)] = e
		}
	}
	e.touch(now)
	do(e.m, v)
}

func (b *bounded[M]) newEntry(lv []string) *seriesEntry[M] {
	m, err := b.vec.GetMetricWithLabelValues(lv...)
	if err != nil {
		panic(err) // the label count is the vector's: the callers are this package's
	}
	return &seriesEntry[M]{m: m, lv: lv}
}

// expire deletes the series (and the overflow series) not updated since
// now-ttl, and returns how many.
func (b *bounded[M]) expire(now int64, ttl time.Duration) int {
	cut := now - int64(ttl)
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for k, e := range b.series {
		if e.seen.Load() <= cut {
			b.vec.DeleteLabelValues(e.lv...)
			delete(b.series, k)
			n++
		}
	}
	if b.over != nil && b.over.seen.Load() <= cut {
		b.vec.DeleteLabelValues(b.over.lv...)
		b.over = nil
		n++
	}
	b.expired.Add(float64(n))
	return n
}

// The updates of the three kinds of vector: plain functions, so that
// passing one allocates nothing.
func counterAdd(c prometheus.Counter, v float64)   { c.Add(v) }
func histObserve(o prometheus.Observer, v float64) { o.Observe(v) }
func gaugeSet(g prometheus.Gauge, v float64)       { g.Set(v) }

type counterSeries struct{ bounded[prometheus.Counter] }

// add adds v to the series lv.
func (c *counterSeries) add(now int64, v float64, lv ...string) { c.update(now, counterAdd, v, lv...) }

type histogramSeries struct{ bounded[prometheus.Observer] }

func (h *histogramSeries) observe(now int64, v float64, lv ...string) {
	h.update(now, histObserve, v, lv...)
}

type gaugeSeries struct{ bounded[prometheus.Gauge] }

func (g *gaugeSeries) set(now int64, v float64, lv ...string) { g.update(now, gaugeSet, v, lv...) }

// Expire deletes the flow metrics' series that no flow updated for
// MetricsOptions.SeriesTTL before now (nothing without a TTL), and returns
// how many it deleted. RunExpiry calls it; tests call it with their clock.
func (m *Metrics) Expire(now time.Time) int {
	if m.ttl <= 0 {
		return 0
	}
	n := 0
	for _, s := range m.tracked {
		n += s.expire(now.UnixNano(), m.ttl)
	}
	return n
}

// RunExpiry calls Expire until ctx ends, every quarter of the TTL (at
// least every second, at most every minute): a series is deleted between
// SeriesTTL and SeriesTTL plus that period after its last update. Without
// a TTL it returns at once.
func (m *Metrics) RunExpiry(ctx context.Context) {
	if m.ttl <= 0 {
		return
	}
	every := min(max(m.ttl/4, time.Second), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.Expire(m.now())
		}
	}
}

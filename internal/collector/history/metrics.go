package history

import "github.com/prometheus/client_golang/prometheus"

// Metric names (docs/metrics.md).
const (
	MetricFlows      = "flowlens_collector_history_flows"
	MetricFollowers  = "flowlens_collector_history_followers"
	MetricFollowLost = "flowlens_collector_history_follow_lost_flows_total"
	MetricRefused    = "flowlens_collector_history_refused_requests_total"
)

// Collectors are the history's metrics, read from the Service when
// scraped.
func (s *Service) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricFlows,
			Help: "Flows in the history (--history-size, --history-max-age)."},
			func() float64 { return float64(s.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricFollowers,
			Help: "GetFlows streams in follow mode open now (flowlens observe --follow)."},
			func() float64 { return float64(s.Stats.Followers.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricFollowLost,
			Help: "Flows not sent to a follower because it read more slowly than flows arrived (each client is told how many)."},
			func() float64 { return float64(s.Stats.FollowLost.Load()) }),
		refusedCollector{s},
	}
}

var refusedDesc = prometheus.NewDesc(MetricRefused,
	"GetFlows calls refused by a bound, by reason: request_bytes (--history-max-request-bytes), filter_terms (--history-max-filter-terms), followers (--history-max-followers), followers_per_client (--history-max-followers-per-client), queries (--history-max-queries).",
	[]string{"reason"}, nil)

// refusedCollector serves Stats.Refused, every reason from the start.
type refusedCollector struct{ s *Service }

func (c refusedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- refusedDesc }

func (c refusedCollector) Collect(ch chan<- prometheus.Metric) {
	for i, r := range refusedReasons {
		ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(c.s.Stats.Refused[i].Load()), r)
	}
}

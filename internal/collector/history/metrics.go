package history

import "github.com/prometheus/client_golang/prometheus"

// Metric names (docs/metrics.md).
const (
	MetricFlows      = "flowlens_collector_history_flows"
	MetricFollowers  = "flowlens_collector_history_followers"
	MetricFollowLost = "flowlens_collector_history_follow_lost_flows_total"
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
	}
}

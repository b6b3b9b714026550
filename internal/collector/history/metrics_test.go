package history

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every metric of the history has its row in docs/metrics.md, and the
// refusals are served by reason, every reason from the start.
func TestMetricsDocumentedAndServed(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{MetricFlows, MetricFollowers, MetricFollowLost, MetricRefused} {
		if !strings.Contains(string(doc), "\n| `"+n+"` |") {
			t.Errorf("metric %s has no row in docs/metrics.md", n)
		}
	}
	s := NewService(Options{})
	s.Stats.refuse(RefusedQueries)
	s.Stats.refuse(RefusedQueries)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, fam := range fams {
		if fam.GetName() != MetricRefused {
			continue
		}
		for _, m := range fam.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if len(got) != len(refusedReasons) || got[RefusedQueries] != 2 || got[RefusedFollowers] != 0 {
		t.Errorf("refusals served: %v, want every reason, queries 2", got)
	}
}

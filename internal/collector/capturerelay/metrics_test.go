package capturerelay

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every metric of the relay has its row in docs/metrics.md, and every
// reason of the lost packets is served from the start.
func TestMetricsDocumentedAndServed(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{MetricRunning, MetricPackets, MetricLostPackets, MetricStreams, MetricRefused} {
		if !strings.Contains(string(doc), "\n| `"+n+"` |") {
			t.Errorf("metric %s has no row in docs/metrics.md", n)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(New(Options{}).Collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range fams {
		got[f.GetName()] = len(f.GetMetric())
	}
	if got[MetricRunning] != 1 || got[MetricPackets] != 1 || got[MetricLostPackets] != 3 || got[MetricStreams] != 1 || got[MetricRefused] != 2 {
		t.Errorf("series served: %v, want 1 running, 1 packets, 3 lost (ring_full, consumer, relay), 1 streams, 2 refused (max_agents, replaced)", got)
	}
}

package enrich_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/pkg/flow"
)

// scrape reads url's /metrics as Prometheus does and returns the families
// named, in the text format, without their HELP lines: what a scraper
// stores of them.
func scrape(t *testing.T, url string, names ...string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	var b bytes.Buffer
	for _, n := range names {
		if mf := fams[n]; mf != nil {
			mf.Help = nil
			if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String()
}

func wantText(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

// A series no flow updated for SeriesTTL is deleted from /metrics, the
// pods' (PodLabels) and the nodes' too, and counted; one updated since
// stays with its value; a deleted series that comes back starts again
// from its new flows (a counter reset, which rate() takes).
func TestSeriesExpire(t *testing.T) {
	now := t0
	m, err := enrich.NewMetrics(enrich.MetricsOptions{PodLabels: true, SeriesTTL: 10 * time.Minute,
		Enabled: []string{enrich.MetricFlowBytes, enrich.MetricSampling}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m}
	handle := func(flows ...fl) {
		t.Helper()
		if err := p.Handle(context.Background(), batch(flows...)); err != nil {
			t.Fatal(err)
		}
	}
	fromWeb1 := fl{src: "10.0.0.1", dst: "10.0.1.1", bytes: 1000, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-a"}
	fromWeb2 := fl{src: "10.0.0.2", dst: "10.0.1.1", bytes: 500, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-b"}
	names := []string{enrich.MetricFlowBytes, enrich.MetricSampling, enrich.MetricSeriesExpired}
	const (
		web1 = `flowlens_collector_flow_bytes_total{direction="egress",dst_namespace="db",dst_pod="db-0",dst_workload="db",src_namespace="shop",src_pod="web-1",src_workload="web"} `
		web2 = `flowlens_collector_flow_bytes_total{direction="egress",dst_namespace="db",dst_pod="db-0",dst_workload="db",src_namespace="shop",src_pod="web-2",src_workload="web"} `
	)
	typeBytes, typeSampling, typeExpired := "# TYPE flowlens_collector_flow_bytes_total counter", "# TYPE flowlens_collector_sampling gauge", "# TYPE flowlens_collector_metric_series_expired_total counter"
	expired := func(bytes, sampling int) []string {
		return []string{typeExpired,
			`flowlens_collector_metric_series_expired_total{metric="flowlens_collector_flow_bytes_total"} ` + itoa(bytes),
			`flowlens_collector_metric_series_expired_total{metric="flowlens_collector_sampling"} ` + itoa(sampling)}
	}

	handle(fromWeb1)
	now = t0.Add(6 * time.Minute)
	handle(fromWeb2)
	if n := m.Expire(t0.Add(9*time.Minute + 59*time.Second)); n != 0 {
		t.Errorf("Expire before the TTL deleted %d series", n)
	}
	want := wantText(slices.Concat([]string{typeBytes, web1 + "1000", web2 + "500"}, expired(0, 0),
		[]string{typeSampling, `flowlens_collector_sampling{node="node-a"} 1`, `flowlens_collector_sampling{node="node-b"} 1`})...)
	if got := scrape(t, srv.URL, names...); got != want {
		t.Fatalf("before the TTL:\n%s\nwant\n%s", got, want)
	}

	// 10 minutes after web-1's flow: its series and node-a's go.
	if n := m.Expire(t0.Add(10 * time.Minute)); n != 2 {
		t.Errorf("Expire at the TTL deleted %d series, want 2", n)
	}
	want = wantText(slices.Concat([]string{typeBytes, web2 + "500"}, expired(1, 1),
		[]string{typeSampling, `flowlens_collector_sampling{node="node-b"} 1`})...)
	if got := scrape(t, srv.URL, names...); got != want {
		t.Fatalf("after web-1's TTL:\n%s\nwant\n%s", got, want)
	}

	// web-1 talks again: its series starts again; web-2's goes at its TTL.
	now = t0.Add(12 * time.Minute)
	handle(fromWeb1)
	if n := m.Expire(t0.Add(16 * time.Minute)); n != 2 {
		t.Errorf("Expire at web-2's TTL deleted %d series, want 2", n)
	}
	want = wantText(slices.Concat([]string{typeBytes, web1 + "1000"}, expired(2, 2),
		[]string{typeSampling, `flowlens_collector_sampling{node="node-a"} 1`})...)
	if got := scrape(t, srv.URL, names...); got != want {
		t.Fatalf("after web-2's TTL:\n%s\nwant\n%s", got, want)
	}

	// Without a TTL nothing expires.
	keep, _ := enrich.NewMetrics(enrich.MetricsOptions{Now: func() time.Time { return t0 }})
	(&enrich.Pipeline{Resolver: resolver(t), Metrics: keep}).Handle(context.Background(), batch(fromWeb1))
	if n := keep.Expire(t0.Add(1000 * time.Hour)); n != 0 {
		t.Errorf("Expire without a TTL deleted %d series", n)
	}
}

// Past MaxSeries, a flow that would create a series is counted in the
// metric's overflow series (labels _overflow), so that the metric's sum
// stays whole, and in metric_series_limited_total; a gauge (sampling)
// drops the value. Series that exist go on counting. The node label, which
// agents send, is capped like any other.
func TestSeriesCap(t *testing.T) {
	m, err := enrich.NewMetrics(enrich.MetricsOptions{MaxSeries: 2,
		Enabled: []string{enrich.MetricFlowBytes, enrich.MetricNodeBytes, enrich.MetricSampling, enrich.MetricRTT}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m}
	// Four workload pairs (shop/web → db, db → shop/web, shop/web → the
	// internet, corp → kube-dns) from four nodes, in two batches; then the
	// first pair again.
	b1 := []fl{
		{src: "10.0.0.1", dst: "10.0.1.1", bytes: 1000, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-a", rtt: time.Millisecond},
		{src: "10.0.1.1", dst: "10.0.0.1", bytes: 300, packets: 1, sampling: 1, dir: flow.DirIngress, node: "node-b", rtt: time.Millisecond},
		{src: "10.0.0.1", dst: "8.8.8.8", bytes: 100, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-c", rtt: time.Millisecond},
	}
	b2 := []fl{
		{src: "172.16.3.3", dst: "10.96.0.10", bytes: 80, packets: 1, sampling: 1, dir: flow.DirIngress, node: "forged-node-d", rtt: time.Second},
		{src: "10.0.0.1", dst: "10.0.1.1", bytes: 1, packets: 1, sampling: 1, dir: flow.DirEgress, node: "node-a"},
	}
	for _, b := range [][]fl{b1, b2} {
		if err := p.Handle(context.Background(), batch(b...)); err != nil {
			t.Fatal(err)
		}
	}
	o := enrich.SeriesOverflow
	want := wantText(
		"# TYPE flowlens_collector_flow_bytes_total counter",
		`flowlens_collector_flow_bytes_total{direction="`+o+`",dst_namespace="`+o+`",dst_workload="`+o+`",src_namespace="`+o+`",src_workload="`+o+`"} 180`,
		`flowlens_collector_flow_bytes_total{direction="egress",dst_namespace="db",dst_workload="db",src_namespace="shop",src_workload="web"} 1001`,
		`flowlens_collector_flow_bytes_total{direction="ingress",dst_namespace="shop",dst_workload="web",src_namespace="db",src_workload="db"} 300`,
		"# TYPE flowlens_collector_metric_series_limited_total counter",
		`flowlens_collector_metric_series_limited_total{metric="flowlens_collector_flow_bytes_total"} 2`,
		`flowlens_collector_metric_series_limited_total{metric="flowlens_collector_node_bytes_total"} 2`,
		`flowlens_collector_metric_series_limited_total{metric="flowlens_collector_rtt_seconds"} 2`,
		`flowlens_collector_metric_series_limited_total{metric="flowlens_collector_sampling"} 2`,
		"# TYPE flowlens_collector_node_bytes_total counter",
		`flowlens_collector_node_bytes_total{dst_node="`+o+`",src_node="`+o+`"} 180`,
		`flowlens_collector_node_bytes_total{dst_node="node-a",src_node="node-b"} 300`,
		`flowlens_collector_node_bytes_total{dst_node="node-b",src_node="node-a"} 1001`,
		"# TYPE flowlens_collector_sampling gauge",
		`flowlens_collector_sampling{node="node-a"} 1`,
		`flowlens_collector_sampling{node="node-b"} 1`,
	)
	if got := scrape(t, srv.URL, enrich.MetricFlowBytes, enrich.MetricSeriesLimited, enrich.MetricNodeBytes, enrich.MetricSampling); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// The histogram's overflow series holds the two RTTs past the cap
	// (1 ms, and 1 s from the forged node).
	rtt := scrape(t, srv.URL, enrich.MetricRTT)
	for _, line := range []string{
		`flowlens_collector_rtt_seconds_count{dst_namespace="db",src_namespace="shop"} 1`,
		`flowlens_collector_rtt_seconds_count{dst_namespace="shop",src_namespace="db"} 1`,
		`flowlens_collector_rtt_seconds_count{dst_namespace="` + o + `",src_namespace="` + o + `"} 2`,
		`flowlens_collector_rtt_seconds_sum{dst_namespace="` + o + `",src_namespace="` + o + `"} 1.001`,
	} {
		if !strings.Contains(rtt, line+"\n") {
			t.Errorf("rtt_seconds lacks %s:\n%s", line, rtt)
		}
	}
	if n := strings.Count(rtt, "_count{"); n != 3 {
		t.Errorf("rtt_seconds: %d series, want 3 (2 and the overflow)", n)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// Concurrent batches past the cap lose nothing: every flow is in a series
// or the overflow series, and the overflow series holds exactly the
// updates the limited counter counts. Expiry running meanwhile (on series
// that are not stale) takes nothing either.
func TestSeriesCapConcurrent(t *testing.T) {
	m, err := enrich.NewMetrics(enrich.MetricsOptions{MaxSeries: 2, SeriesTTL: time.Hour, Now: func() time.Time { return t0 },
		Enabled: []string{enrich.MetricFlowPackets}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	p := &enrich.Pipeline{Resolver: resolver(t), Metrics: m}
	// Five workload pairs, one packet each.
	pairs := []fl{
		{src: "10.0.0.1", dst: "10.0.1.1", packets: 1, sampling: 1, dir: flow.DirEgress},
		{src: "10.0.1.1", dst: "10.0.0.1", packets: 1, sampling: 1, dir: flow.DirEgress},
		{src: "10.0.0.1", dst: "8.8.8.8", packets: 1, sampling: 1, dir: flow.DirEgress},
		{src: "172.16.3.3", dst: "10.96.0.10", packets: 1, sampling: 1, dir: flow.DirEgress},
		{src: "192.168.0.11", dst: "10.0.0.2", packets: 1, sampling: 1, dir: flow.DirEgress},
	}
	const workers, batches = 4, 200
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
				m.Expire(t0)
			}
		}
	}()
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range batches {
				b := []fl{pairs[(w+i)%5], pairs[(w+2*i)%5], pairs[(w+3*i+1)%5]}
				if err := p.Handle(context.Background(), batch(b...)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	tp := expfmt.NewTextParser(model.UTF8Validation)
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	fams, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var total, overflow float64
	series := 0
	for _, s := range fams[enrich.MetricFlowPackets].GetMetric() {
		total += s.GetCounter().GetValue()
		series++
		if s.GetLabel()[0].GetValue() == enrich.SeriesOverflow {
			overflow = s.GetCounter().GetValue()
		}
	}
	limited := fams[enrich.MetricSeriesLimited].GetMetric()[0].GetCounter().GetValue()
	if want := float64(workers * batches * 3); total != want || series != 3 || overflow != limited || limited == 0 {
		t.Errorf("flow_packets_total: %v packets in %d series (overflow %v), limited %v; want %v in 3, overflow = limited > 0",
			total, series, overflow, limited, want)
	}
}

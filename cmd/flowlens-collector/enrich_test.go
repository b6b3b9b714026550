package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/rest"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
	"github.com/flowlens/flowlens/pkg/flow"
)

// staticCluster is a --k8s-static file: a pod and a Service.
const staticCluster = `{
  "10.0.0.1":  {"kind": "pod", "namespace": "shop", "name": "web-1", "workload": "web", "workload_kind": "Deployment", "node": "node-a"},
  "10.0.0.53": {"kind": "service", "namespace": "kube-system", "name": "kube-dns", "workload": "kube-dns", "workload_kind": "Service"}
}`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// sampledRecords are collectortest.Records() with the TCP flow sampled 1 in 10.
func sampledRecords() []flow.Record {
	recs := collectortest.Records()
	recs[1].Sampling = 10
	return recs
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// scrape parses the collector's /metrics.
func scrape(t *testing.T, a collector.Addrs) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, "http://"+a.Metrics.String()+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// sample is the value of the series of family name with exactly labels
// ("k=v,k=v"); for a histogram, its count. ok is false when absent.
func sample(fams map[string]*dto.MetricFamily, name, labels string) (float64, bool) {
	var want []string
	if labels != "" {
		want = strings.Split(labels, ",")
	}
	sort.Strings(want)
	return promtest.Value(fams, name, want...)
}

func expectSamples(t *testing.T, fams map[string]*dto.MetricFamily, want map[[2]string]float64) {
	t.Helper()
	for k, w := range want {
		got, ok := sample(fams, k[0], k[1])
		if !ok {
			t.Errorf("%s{%s}: absent, want %v", k[0], k[1], w)
		} else if got != w {
			t.Errorf("%s{%s} = %v, want %v", k[0], k[1], got, w)
		}
	}
}

// End to end without a cluster: the agent's gRPC exporter sends flows, the
// collector resolves their addresses from a static table and subnet
// labels, prints JSON lines with src_k8s/dst_k8s, and /metrics has the
// exact values (bytes and packets scaled by sampling).
func TestEndToEndEnrichedJSONAndMetrics(t *testing.T) {
	static := writeFile(t, "cluster.json", staticCluster)
	a, out, stop := startFull(t, "--k8s-static", static, "--subnet-labels", "corp=192.168.0.0/16")
	// Ready once the gRPC server serves (the metrics listener comes first):
	// poll as a readiness probe does.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body := httpGet(t, "http://"+a.Metrics.String()+"/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after 5s: %d %s", code, body)
		}
	}
	if code, body := httpGet(t, "http://"+a.Metrics.String()+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	recs := sampledRecords()
	collectortest.Send(t, a.GRPC.String(), recs)

	// A malformed message counts as a decode error.
	conn, err := grpc.NewClient(a.GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := flowv1.NewFlowCollectorClient(conn).Export(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&flowv1.FlowBatch{Flows: []*flowv1.Flow{{SrcAddr: []byte{1, 2, 3, 4, 5}}}})
	if _, err := st.CloseAndRecv(); err == nil {
		t.Fatal("invalid flow accepted")
	}

	fams := scrape(t, a)
	web := "src_namespace=shop,src_workload=web"
	expectSamples(t, fams, map[[2]string]float64{
		{"flowlens_collector_flow_bytes_total", web + ",dst_namespace=kube-system,dst_workload=kube-dns,direction=ingress"}:   120,
		{"flowlens_collector_flow_packets_total", web + ",dst_namespace=kube-system,dst_workload=kube-dns,direction=ingress"}: 2,
		{"flowlens_collector_flow_bytes_total", web + ",dst_namespace=,dst_workload=corp,direction=both"}:                     90000,
		{"flowlens_collector_flow_packets_total", web + ",dst_namespace=,dst_workload=corp,direction=both"}:                   100,
		// No interface listed: no direction.
		{"flowlens_collector_flow_bytes_total", "src_namespace=,src_workload=external,dst_namespace=,dst_workload=external,direction="}: 104,
		{"flowlens_collector_node_bytes_total", "src_node=node-a,dst_node="}:                                                            90120,
		{"flowlens_collector_node_bytes_total", "src_node=,dst_node="}:                                                                  104,
		{"flowlens_collector_drop_packets_total", "src_namespace=shop,dst_namespace=,cause=NETFILTER_DROP"}:                             1,
		{"flowlens_collector_drop_bytes_total", "src_namespace=shop,dst_namespace=,cause=NETFILTER_DROP"}:                               60,
		{"flowlens_collector_rtt_seconds", "src_namespace=shop,dst_namespace="}:                                                         1,
		{"flowlens_collector_flows_total", ""}:                                                                                          3,
		{"flowlens_collector_sampling", "node=node-7"}:                                                                                  1,
		{"flowlens_collector_received_flows_total", ""}:                                                                                 3,
		{"flowlens_collector_decode_errors_total", ""}:                                                                                  1,
		{"flowlens_collector_enrichment_misses_total", "side=src"}:                                                                      1,
		{"flowlens_collector_enrichment_misses_total", "side=dst"}:                                                                      2,
	})
	if n := len(fams["flowlens_collector_flow_bytes_total"].GetMetric()); n != 3 {
		t.Errorf("%d flow_bytes series, want 3", n)
	}
	if _, ok := fams["flowlens_collector_informer_synced"]; ok {
		t.Error("informer_synced without informers")
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}

	if code := stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	lines := out.Lines()
	if len(lines) != len(recs) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(recs), strings.Join(lines, "\n"))
	}
	const id = `,"node_name":"node-7","agent_ip":"192.0.2.1"`
	web1 := `{"kind":"pod","namespace":"shop","name":"web-1","workload":"web","workload_kind":"Deployment","node":"node-a"}`
	for i, k8s := range []string{
		`,"src_k8s":` + web1 + `,"dst_k8s":{"kind":"service","namespace":"kube-system","name":"kube-dns","workload":"kube-dns","workload_kind":"Service"}}`,
		`,"src_k8s":` + web1 + `,"dst_k8s":{"kind":"external","subnet":"corp"}}`,
		`,"src_k8s":{"kind":"external"},"dst_k8s":{"kind":"external"}}`,
	} {
		agent := string(recs[i].AppendJSON(nil))
		if want := agent[:len(agent)-1] + id + k8s; lines[i] != want {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], want)
		}
	}
}

func TestTableEnriched(t *testing.T) {
	static := writeFile(t, "cluster.json", staticCluster)
	addr, out, stop := start(t, "--k8s-static", static, "--subnet-labels", "corp=192.168.0.0/16", "--output", "table")
	collectortest.Send(t, addr, collectortest.Records())
	stop()
	lines := out.Lines()
	if len(lines) != 4 || !strings.HasSuffix(lines[0], "NODE              SRC_K8S                           DST_K8S") {
		t.Fatalf("want a header with SRC_K8S DST_K8S and 3 rows, got:\n%s", strings.Join(lines, "\n"))
	}
	for i, w := range []string{
		"node-7            shop/web-1(Deployment/web)        svc:kube-system/kube-dns",
		"node-7            shop/web-1(Deployment/web)        ext:corp",
		"node-7            ext                               ext",
	} {
		if !strings.HasSuffix(lines[1+i], w) {
			t.Errorf("row %d: %q does not end with %q", i, lines[1+i], w)
		}
	}
}

// --output none prints nothing and counts everything; --metrics keeps only
// the named flow metrics; --pod-labels adds src_pod/dst_pod.
func TestMetricsFlags(t *testing.T) {
	static := writeFile(t, "cluster.json", staticCluster)
	a, out, stop := startFull(t, "--k8s-static", static, "--output", "none", "--metrics", "flow_bytes_total,flowlens_collector_drop_packets_total", "--pod-labels")
	collectortest.Send(t, a.GRPC.String(), collectortest.Records())
	fams := scrape(t, a)
	var flowFams []string
	for n := range fams {
		if strings.HasPrefix(n, "flowlens_collector_") {
			flowFams = append(flowFams, strings.TrimPrefix(n, "flowlens_collector_"))
		}
	}
	sort.Strings(flowFams)
	if got := strings.Join(flowFams, ","); got != "ack_state_errors_total,build_info,capture_lost_packets_total,capture_packets_total,capture_streams,capture_streams_refused_total,captures_running,decode_errors_total,drop_packets_total,duplicate_batches_total,duplicate_flows_total,enrichment_misses_total,flow_bytes_total,history_flows,history_follow_lost_flows_total,history_followers,history_refused_requests_total,metric_series_expired_total,metric_series_limited_total,received_flows_total,refused_flows_total,refused_streams_total" {
		t.Errorf("families: %s", got)
	}
	expectSamples(t, fams, map[[2]string]float64{
		{"flowlens_collector_flow_bytes_total", "src_namespace=shop,src_workload=web,src_pod=web-1,dst_namespace=kube-system,dst_workload=kube-dns,dst_pod=,direction=ingress"}: 120,
		{"flowlens_collector_received_flows_total", ""}: 3,
	})
	stop()
	if lines := out.Lines(); len(lines) != 0 {
		t.Errorf("--output none printed:\n%s", strings.Join(lines, "\n"))
	}

	// No metrics server.
	a, _, _ = startFull(t, "--metrics-address", "")
	if a.Metrics != nil {
		t.Errorf("metrics server on %v with --metrics-address=\"\"", a.Metrics)
	}
}

// In a cluster whose API server cannot be reached, the collector is not
// ready while it waits for its caches, then after --k8s-sync-timeout
// receives flows anyway (ready), enriches them as external, and
// informer_synced says the caches are not synced.
func TestUnreachableClusterDegrades(t *testing.T) {
	out, errOut := &collectortest.SyncBuffer{}, &collectortest.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrCh := make(chan collector.Addrs, 1)
	code := make(chan int, 1)
	inCluster := func() (*rest.Config, error) {
		return &rest.Config{Host: "http://127.0.0.1:1", Timeout: time.Second}, nil
	}
	go func() {
		// --auth none: this test is about the enrichment (the calls'
		// authorization is TestAuthorization's).
		code <- run(ctx, []string{"--listen", "127.0.0.1:0", "--auth", "none", "--metrics-address", "127.0.0.1:0", "--k8s-sync-timeout", "300ms"}, out, errOut,
			&env{Options: collector.Options{Ready: func(a collector.Addrs) { addrCh <- a }, InCluster: inCluster}})
	}()
	var a collector.Addrs
	select {
	case a = <-addrCh:
	case c := <-code:
		t.Fatalf("collector exited with %d: %s", c, errOut.String())
	}
	if code, body := httpGet(t, "http://"+a.Metrics.String()+"/readyz"); code != 503 || !strings.Contains(body, "not synced") {
		t.Errorf("/readyz while syncing: %d %s", code, body)
	}
	collectortest.Send(t, a.GRPC.String(), collectortest.Records()[:1])
	fams := scrape(t, a)
	expectSamples(t, fams, map[[2]string]float64{
		{"flowlens_collector_informer_synced", "resource=pods"}:        0,
		{"flowlens_collector_informer_synced", "resource=replicasets"}: 0,
		{"flowlens_collector_informer_synced", "resource=services"}:    0,
		{"flowlens_collector_informer_synced", "resource=nodes"}:       0,
		{"flowlens_collector_enrichment_misses_total", "side=src"}:     1,
	})
	// Serving flows: ready, whatever the caches (informer_synced says).
	if code, body := httpGet(t, "http://"+a.Metrics.String()+"/readyz"); code != 200 {
		t.Errorf("/readyz once serving: %d %s", code, body)
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit %d: %s", c, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("collector did not stop")
	}
	if l := out.Lines(); len(l) != 1 || !strings.Contains(l[0], `"src_k8s":{"kind":"external"}`) {
		t.Errorf("output: %v", l)
	}
	if !strings.Contains(errOut.String(), "Kubernetes caches not synced") {
		t.Errorf("no warning about the caches:\n%s", errOut.String())
	}
}

// --k8s-enrich asked for, with nothing to connect to: exit 1 (the choice
// itself is internal/collector's TestEnrichmentChoice).
func TestEnrichmentAskedOutsideCluster(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("HOME", t.TempDir())
	var errOut collectortest.SyncBuffer
	if code := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--metrics-address", "", "--k8s-enrich"}, io.Discard, &errOut,
		&env{Options: collector.Options{InCluster: notInCluster}}); code != 1 {
		t.Errorf("--k8s-enrich outside a cluster: exit %d (%s)", code, errOut.String())
	}
}

func TestBadEnrichmentAndMetricsFlags(t *testing.T) {
	static := writeFile(t, "cluster.json", staticCluster)
	for _, args := range [][]string{
		{"--metrics", "flow_bytes"}, {"--subnet-labels", "corp"}, {"--subnet-labels", "corp=10.0.0.0/33"},
		{"--k8s-static", static, "--k8s-enrich=false"}, {"--k8s-static", static, "--kubeconfig", "x"},
		{"--metrics-address", "9401"}, {"--output", "yaml"},
	} {
		var errOut collectortest.SyncBuffer
		if code := run(context.Background(), args, io.Discard, &errOut, &env{Options: collector.Options{InCluster: notInCluster}}); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errOut.String())
		}
	}
	for _, content := range []string{`[]`, `{"10.0.0.300": {"kind": "pod"}}`, `{"10.0.0.1": {"kind": "external"}}`} {
		var errOut collectortest.SyncBuffer
		file := writeFile(t, "bad.json", content)
		if code := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--k8s-static", file, "--metrics-address", ""}, io.Discard, &errOut, &env{Options: collector.Options{InCluster: notInCluster}}); code != 1 {
			t.Errorf("%s: exit %d, want 1 (%s)", content, code, errOut.String())
		}
	}
}

// The series bounds, in the collector as run: with --metrics-max-series 1
// the first flow's workload pair has flow_bytes_total's one series and the
// others count in its _overflow series, the sum whole, and the limited
// counter says so; with --metrics-series-ttl 1s, once no flow came for a
// second, the series are gone from /metrics (the expiry runs every second)
// and counted as expired.
func TestMetricsSeriesBounds(t *testing.T) {
	static := writeFile(t, "cluster.json", staticCluster)
	a, _, _ := startFull(t, "--k8s-static", static, "--subnet-labels", "corp=192.168.0.0/16",
		"--metrics-max-series", "1", "--metrics-series-ttl", "1s", "--metrics", "flow_bytes_total,sampling")
	collectortest.Send(t, a.GRPC.String(), sampledRecords())
	sent := time.Now()
	fams := scrape(t, a)
	web := "src_namespace=shop,src_workload=web"
	o := "_overflow"
	expectSamples(t, fams, map[[2]string]float64{
		{"flowlens_collector_flow_bytes_total", web + ",dst_namespace=kube-system,dst_workload=kube-dns,direction=ingress"}:                                     120,
		{"flowlens_collector_flow_bytes_total", "src_namespace=" + o + ",src_workload=" + o + ",dst_namespace=" + o + ",dst_workload=" + o + ",direction=" + o}: 90000 + 104,
		{"flowlens_collector_metric_series_limited_total", "metric=flowlens_collector_flow_bytes_total"}:                                                        2,
		{"flowlens_collector_metric_series_limited_total", "metric=flowlens_collector_sampling"}:                                                                0,
		{"flowlens_collector_sampling", "node=node-7"}:                                                                                                          1,
		{"flowlens_collector_metric_series_expired_total", "metric=flowlens_collector_flow_bytes_total"}:                                                        0,
	})
	if n := len(fams["flowlens_collector_flow_bytes_total"].GetMetric()); n != 2 {
		t.Errorf("%d flow_bytes series, want 2 (one and the overflow)", n)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		fams = scrape(t, a)
		if fams["flowlens_collector_flow_bytes_total"] == nil && fams["flowlens_collector_sampling"] == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("series still served 10s after the last flow, with a TTL of 1s")
		}
	}
	if d := time.Since(sent); d < time.Second {
		t.Errorf("series gone %v after the last flow, before the TTL", d)
	}
	expectSamples(t, fams, map[[2]string]float64{
		{"flowlens_collector_metric_series_expired_total", "metric=flowlens_collector_flow_bytes_total"}: 2,
		{"flowlens_collector_metric_series_expired_total", "metric=flowlens_collector_sampling"}:         1,
	})
}

package render

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/shared/httpserve"
	"github.com/flowlens/flowlens/internal/shared/httpserve/httpservetest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// podFiles lays out, under a temporary directory standing for ConfigDir,
// what a pod would see: files (path: content, ConfigDir rewritten to the
// directory) and pki's certificate, key and, with mutual, CA where the pod
// mounts the Secrets of metricsTLS. It returns a function mapping a path of
// the pod to the file's.
func podFiles(t *testing.T, files map[string][]byte, pki *receivertest.PKI, mutual bool) func(string) string {
	t.Helper()
	dir := t.TempDir()
	at := func(path string) string { return filepath.Join(dir, strings.TrimPrefix(path, ConfigDir)) }
	write := func(path string, data []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(at(path)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(at(path), []byte(strings.ReplaceAll(string(data), ConfigDir, dir)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(from, to string) {
		t.Helper()
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		write(to, data)
	}
	for path, data := range files {
		write(path, data)
	}
	copyFile(pki.ServerCert, MetricsTLSCertPath)
	copyFile(pki.ServerKey, MetricsTLSKeyPath)
	if mutual {
		copyFile(pki.CA, MetricsClientCAPath)
	}
	return at
}

// serveMetrics serves a registry with the web configuration file web, as
// the agent and the collector do (package httpserve); it returns the
// server's address.
func serveMetrics(t *testing.T, web string) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_up", Help: "Up."})
	g.Set(1)
	reg.MustRegister(g)
	srv, err := httpserve.Listen("127.0.0.1:0", web, httpserve.Handler(httpserve.Options{Gatherer: reg}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return srv.Addr().String()
}

// agentWithMetricsTLS lays out what an agent pod would see for spec: the
// rendered agent.yaml and web configuration, and pki's files where the
// DaemonSet mounts the Secrets. It loads the configuration with the agent's
// own loader (which checks the web configuration and its files) and serves
// a registry with it, as the agent does; it returns the server's address.
func agentWithMetricsTLS(t *testing.T, spec v1alpha1.FlowCollectorSpec, pki *receivertest.PKI) string {
	t.Helper()
	s := WithDefaults(spec)
	cfg, err := AgentConfig(&s)
	if err != nil {
		t.Fatal(err)
	}
	web, err := WebConfig(s.Agent.MetricsTLS, "spec.agent.metricsTLS")
	if err != nil {
		t.Fatal(err)
	}
	at := podFiles(t, map[string][]byte{ConfigPath: cfg, WebConfigPath: web}, pki, s.Agent.MetricsTLS.ClientCASecretRef != nil)

	c, err := config.Load([]string{"--config", at(ConfigPath)}, func(string) string { return "" })
	if err != nil {
		t.Fatalf("the agent rejects the operator's configuration: %v\n%s\n%s", err, cfg, web)
	}
	if c.WebConfigFile != at(WebConfigPath) {
		t.Fatalf("web_config_file %q, want %q", c.WebConfigFile, at(WebConfigPath))
	}
	return serveMetrics(t, c.WebConfigFile)
}

// TestMetricsTLSServes: the web configuration the operator renders, with
// files where it mounts the Secrets, serves TLS that a scraper trusting the
// CA reads and plain HTTP cannot; with a client CA, only scrapers with a
// certificate of it are answered. Without metricsTLS nothing is rendered.
func TestMetricsTLSServes(t *testing.T) {
	pki := receivertest.NewPKI(t)
	server := &v1alpha1.MetricsTLS{ServerSecretRef: v1alpha1.SecretRef{Name: "agent-metrics"}}

	url := "https://" + agentWithMetricsTLS(t, v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{MetricsTLS: server}}, pki) + "/metrics"
	if code, body, err := httpservetest.Get(httpservetest.Client(t, pki.CA, "", ""), url); err != nil || code != 200 || !strings.Contains(body, "test_up 1") {
		t.Errorf("TLS scrape trusting the CA: %d %v\n%s", code, err, body)
	}
	if code, body, err := httpservetest.Get(http.DefaultClient, "http"+strings.TrimPrefix(url, "https")); err == nil &&
		(code != http.StatusBadRequest || strings.Contains(body, "test_up")) {
		t.Errorf("plain HTTP scrape of the TLS endpoint: %d\n%s", code, body)
	}

	mutual := *server
	mutual.ClientCASecretRef = &v1alpha1.SecretKeyRef{Name: "scrapers-ca"}
	url = "https://" + agentWithMetricsTLS(t, v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{MetricsTLS: &mutual}}, pki) + "/metrics"
	if code, body, err := httpservetest.Get(httpservetest.Client(t, pki.CA, pki.ClientCert, pki.ClientKey), url); err != nil || code != 200 || !strings.Contains(body, "test_up 1") {
		t.Errorf("mTLS scrape with a client certificate of the CA: %d %v\n%s", code, err, body)
	}
	for what, c := range map[string]*http.Client{
		"no client certificate (as the kubelet's probes)": httpservetest.Client(t, pki.CA, "", ""),
		"a client certificate of another CA":              httpservetest.Client(t, pki.CA, pki.OtherCert, pki.OtherKey),
	} {
		if code, _, err := httpservetest.Get(c, url); err == nil {
			t.Errorf("mTLS scrape with %s: answered %d, want the handshake refused", what, code)
		}
	}

	s := WithDefaults(v1alpha1.FlowCollectorSpec{})
	if web, err := WebConfig(s.Agent.MetricsTLS, "spec.agent.metricsTLS"); web != nil || err != nil {
		t.Errorf("web configuration without metricsTLS: %q %v, want none", web, err)
	}
}

// kafkaCollector builds the Kafka collector's objects for a kafka exporter
// and spec.collector.metricsTLS t.
func kafkaCollector(t *testing.T, tls *v1alpha1.MetricsTLS) *CollectorObjects {
	t.Helper()
	spec := v1alpha1.FlowCollectorSpec{
		Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterKafka, Kafka: &v1alpha1.KafkaExporter{Brokers: []string{"kafka:9092"}}}},
		Collector: v1alpha1.CollectorSpec{MetricsTLS: tls},
	}
	o, err := Build(collector(spec), Options{DefaultImage: "agent", DefaultCollectorImage: "collector"})
	if err != nil {
		t.Fatal(err)
	}
	return o.Collector
}

// collectorMounts returns the collector container's mounts as
// "path <- source" ("configmap NAME" or "secret NAME key:path,..."), and
// whether each is read-only.
func collectorMounts(o *CollectorObjects) map[string]string {
	pod := o.Deployment.Spec.Template.Spec
	sources := map[string]string{}
	for _, v := range pod.Volumes {
		switch {
		case v.ConfigMap != nil:
			sources[*v.Name] = "configmap " + *v.ConfigMap.Name
		case v.Secret != nil:
			var items []string
			for _, it := range v.Secret.Items {
				items = append(items, *it.Key+":"+*it.Path)
			}
			sources[*v.Name] = "secret " + *v.Secret.SecretName + " " + strings.Join(items, ",")
		}
	}
	out := map[string]string{}
	for _, m := range pod.Containers[0].VolumeMounts {
		ro := m.ReadOnly != nil && *m.ReadOnly
		out[*m.MountPath] = fmt.Sprintf("%s (read-only %v)", sources[*m.Name], ro)
	}
	return out
}

// webConfigArg returns the value of the collector's --web-config-file, or "".
func webConfigArg(o *CollectorObjects) string {
	for _, a := range o.Deployment.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--web-config-file="); ok {
			return v
		}
	}
	return ""
}

// TestCollectorMetricsTLSServes: spec.collector.metricsTLS renders the web
// configuration into the collector's ConfigMap, mounted where
// --web-config-file says, with the Secrets where the web configuration
// says; laid out so, the collector's own check of --web-config-file passes
// and the server it runs (package httpserve) serves TLS, requiring client
// certificates with a client CA. Each setting has its own config hash;
// without metricsTLS the collector has neither the flag nor the mounts.
func TestCollectorMetricsTLSServes(t *testing.T) {
	pki := receivertest.NewPKI(t)
	plain := kafkaCollector(t, nil)
	if len(plain.ConfigMap.Data) != 0 || webConfigArg(plain) != "" || len(collectorMounts(plain)) != 0 {
		t.Errorf("plain HTTP: config map %v, --web-config-file %q, mounts %v; want none",
			plain.ConfigMap.Data, webConfigArg(plain), collectorMounts(plain))
	}
	if p := plain.Deployment.Spec.Template.Spec.Containers[0].ReadinessProbe; p.HTTPGet == nil || p.HTTPGet.Scheme != nil {
		t.Errorf("plain HTTP readiness probe %+v, want an HTTP GET", p)
	}
	hashes := map[string]string{plain.ConfigHash: "plain HTTP"}

	server := &v1alpha1.MetricsTLS{ServerSecretRef: v1alpha1.SecretRef{Name: "collector-metrics"}}
	mutual := *server
	mutual.ClientCASecretRef = &v1alpha1.SecretKeyRef{Name: "scrapers-ca"}
	for _, tc := range []struct {
		name string
		tls  *v1alpha1.MetricsTLS
	}{{"TLS", server}, {"mutual TLS", &mutual}} {
		t.Run(tc.name, func(t *testing.T) {
			o := kafkaCollector(t, tc.tls)
			if other, ok := hashes[o.ConfigHash]; ok {
				t.Errorf("config hash %s, the same as %s's", o.ConfigHash, other)
			}
			hashes[o.ConfigHash] = tc.name
			if got := o.Deployment.Spec.Template.Annotations[ConfigHashAnnotation]; got != o.ConfigHash {
				t.Errorf("pod template hash %q, want %q", got, o.ConfigHash)
			}
			want := map[string]string{
				ConfigDir:     "configmap " + CollectorName + " (read-only true)",
				MetricsTLSDir: "secret collector-metrics tls.crt:tls.crt,tls.key:tls.key (read-only true)",
			}
			if tc.tls.ClientCASecretRef != nil {
				want[MetricsClientCADir] = "secret scrapers-ca ca.crt:ca.crt (read-only true)"
			}
			if got := collectorMounts(o); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("mounts\n%v\nwant\n%v", got, want)
			}
			if webConfigArg(o) != WebConfigPath {
				t.Fatalf("--web-config-file %q, want %q", webConfigArg(o), WebConfigPath)
			}
			web := o.ConfigMap.Data[WebConfigKey]
			if !strings.HasPrefix(web, "# Generated by the flowlens operator from spec.collector.metricsTLS: do not edit.\n") {
				t.Errorf("web configuration header:\n%s", web)
			}

			at := podFiles(t, map[string][]byte{WebConfigPath: []byte(web)}, pki, tc.tls.ClientCASecretRef != nil)
			if err := httpserve.CheckWebConfig("--web-config-file", at(WebConfigPath)); err != nil {
				t.Fatalf("the collector rejects the operator's web configuration: %v\n%s", err, web)
			}
			url := "https://" + serveMetrics(t, at(WebConfigPath)) + "/metrics"
			scraper := httpservetest.Client(t, pki.CA, "", "")
			if tc.tls.ClientCASecretRef != nil {
				if code, _, err := httpservetest.Get(scraper, url); err == nil {
					t.Errorf("mTLS scrape without a client certificate: answered %d, want the handshake refused", code)
				}
				scraper = httpservetest.Client(t, pki.CA, pki.ClientCert, pki.ClientKey)
			}
			if code, body, err := httpservetest.Get(scraper, url); err != nil || code != 200 || !strings.Contains(body, "test_up 1") {
				t.Errorf("scrape: %d %v\n%s", code, err, body)
			}
		})
	}
}

package render

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/config"
	"github.com/flowlens/flowlens/internal/httpserve"
	"github.com/flowlens/flowlens/internal/httpserve/httpservetest"
	"github.com/flowlens/flowlens/pkg/collector/collectortest"
)

// agentWithMetricsTLS lays out what an agent pod would see for spec under a
// temporary directory standing for ConfigDir: the rendered agent.yaml and
// web configuration, and pki's files where the DaemonSet mounts the
// Secrets. It loads the configuration with the agent's own loader (which
// checks the web configuration and its files) and serves a registry with
// it, as the agent does; it returns the server's address.
func agentWithMetricsTLS(t *testing.T, spec v1alpha1.FlowCollectorSpec, pki *collectortest.PKI) string {
	t.Helper()
	s := WithDefaults(spec)
	cfg, err := AgentConfig(&s)
	if err != nil {
		t.Fatal(err)
	}
	web, err := WebConfig(&s)
	if err != nil {
		t.Fatal(err)
	}
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
	write(ConfigPath, cfg)
	write(WebConfigPath, web)
	copyFile(pki.ServerCert, MetricsTLSCertPath)
	copyFile(pki.ServerKey, MetricsTLSKeyPath)
	if s.Agent.MetricsTLS.ClientCASecretRef != nil {
		copyFile(pki.CA, MetricsClientCAPath)
	}

	c, err := config.Load([]string{"--config", at(ConfigPath)}, func(string) string { return "" })
	if err != nil {
		t.Fatalf("the agent rejects the operator's configuration: %v\n%s\n%s", err, cfg, web)
	}
	if c.WebConfigFile != at(WebConfigPath) {
		t.Fatalf("web_config_file %q, want %q", c.WebConfigFile, at(WebConfigPath))
	}
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_up", Help: "Up."})
	g.Set(1)
	reg.MustRegister(g)
	srv, err := httpserve.Listen("127.0.0.1:0", c.WebConfigFile, httpserve.Handler(httpserve.Options{Gatherer: reg}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return srv.Addr().String()
}

// TestMetricsTLSServes: the web configuration the operator renders, with
// files where it mounts the Secrets, serves TLS that a scraper trusting the
// CA reads and plain HTTP cannot; with a client CA, only scrapers with a
// certificate of it are answered. Without metricsTLS nothing is rendered.
func TestMetricsTLSServes(t *testing.T) {
	pki := collectortest.NewPKI(t)
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
	if web, err := WebConfig(&s); web != nil || err != nil {
		t.Errorf("web configuration without metricsTLS: %q %v, want none", web, err)
	}
}

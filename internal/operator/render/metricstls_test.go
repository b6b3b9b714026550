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
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/shared/httpserve"
	"github.com/flowlens/flowlens/internal/shared/httpserve/httpservetest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// podFiles lays out, under a temporary directory standing for ConfigDir,
// what a pod would see: files (path: content, ConfigDir rewritten to the
// directory) and pki's certificate, key and, unless caPath is "", CA (at
// caPath) where the pod mounts the Secrets of metricsTLS. It returns a
// function mapping a path of the pod to the file's.
func podFiles(t *testing.T, files map[string][]byte, pki *receivertest.PKI, caPath string) func(string) string {
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
	if caPath != "" {
		copyFile(pki.CA, caPath)
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

// clientCAPath is where the pod finds the client CA for t: the default's
// or t's, "" for none.
func clientCAPath(t *v1alpha1.MetricsTLS) string {
	switch {
	case t == nil:
		return MetricsDefaultClientCAPath
	case t.ClientCASecretRef != nil:
		return MetricsClientCAPath
	}
	return ""
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
	web, err := WebConfig(s.Agent.MetricsTLS, s.MetricsPlaintext, "spec.agent.metricsTLS")
	if err != nil {
		t.Fatal(err)
	}
	at := podFiles(t, map[string][]byte{ConfigPath: cfg, WebConfigPath: web}, pki, clientCAPath(s.Agent.MetricsTLS))

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

	s := WithDefaults(v1alpha1.FlowCollectorSpec{MetricsPlaintext: true})
	if web, err := WebConfig(s.Agent.MetricsTLS, s.MetricsPlaintext, "spec.agent.metricsTLS"); web != nil || err != nil {
		t.Errorf("web configuration with metricsPlaintext: %q %v, want none", web, err)
	}
	if cfg, _ := AgentConfig(&s); strings.Contains(string(cfg), "web_config_file") {
		t.Errorf("agent configuration with metricsPlaintext names a web configuration:\n%s", cfg)
	}
}

// TestDefaultMetricsTLSServes: without metricsTLS (the default), the
// agent's web configuration is DefaultWebConfig, the Secret
// flowlens-metrics-tls (certificate, key and CA bundle) is mounted where it
// says, and the probes GET over HTTPS. Laid out so, the agent's loader
// accepts it and the server answers the kubelet (no certificate) on
// /healthz and /readyz, refuses it /metrics with 403 naming the scrape
// identity, and serves /metrics to a client certificate of the CA.
func TestDefaultMetricsTLSServes(t *testing.T) {
	pki := receivertest.NewPKI(t)
	web, err := DefaultWebConfig()
	if err != nil {
		t.Fatal(err)
	}
	const wantWeb = "# Generated by the flowlens operator from its default metrics TLS (docs/security.md): do not edit.\n" +
		"tls_server_config:\n" +
		"    cert_file: /etc/flowlens/metrics/tls/tls.crt\n" +
		"    key_file: /etc/flowlens/metrics/tls/tls.key\n" +
		"    client_auth_type: VerifyClientCertIfGiven\n" +
		"    client_ca_file: /etc/flowlens/metrics/tls/ca.crt\n"
	if string(web) != wantWeb {
		t.Errorf("default web configuration:\n%s\nwant\n%s", web, wantWeb)
	}
	o, err := Build(collector(v1alpha1.FlowCollectorSpec{}), Options{DefaultImage: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.ConfigMap.Data[WebConfigKey]; got != string(web) {
		t.Errorf("agent ConfigMap's %s:\n%s\nwant the default", WebConfigKey, got)
	}
	if got := o.MetricsWebConfig.Data[WebConfigKey]; *o.MetricsWebConfig.Name != "flowlens-metrics-web-config" || got != string(web) {
		t.Errorf("ConfigMap %s's %s:\n%s\nwant the default", *o.MetricsWebConfig.Name, WebConfigKey, got)
	}
	pod := o.DaemonSet.Spec.Template.Spec
	var secret string
	for _, v := range pod.Volumes {
		if *v.Name == "metrics-tls" {
			var items []string
			for _, it := range v.Secret.Items {
				items = append(items, *it.Key+":"+*it.Path)
			}
			secret = *v.Secret.SecretName + " " + strings.Join(items, ",")
		}
	}
	if want := "flowlens-metrics-tls tls.crt:tls.crt,tls.key:tls.key,ca.crt:ca.crt"; secret != want {
		t.Errorf("metrics-tls volume %q, want %q", secret, want)
	}
	ctr := pod.Containers[0]
	for name, p := range map[string]*corev1ac.ProbeApplyConfiguration{"startup": ctr.StartupProbe, "liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe} {
		if p.HTTPGet == nil || p.HTTPGet.Scheme == nil || *p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v, want an HTTPS GET", name, p)
		}
	}

	base := "https://" + agentWithMetricsTLS(t, v1alpha1.FlowCollectorSpec{}, pki)
	anonymous := httpservetest.Client(t, pki.CA, "", "")
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body, err := httpservetest.Get(anonymous, base+path); err != nil || code != 200 {
			t.Errorf("%s without a client certificate (the kubelet): %d %v %q", path, code, err, body)
		}
	}
	if code, body, err := httpservetest.Get(anonymous, base+"/metrics"); err != nil || code != http.StatusForbidden ||
		!strings.Contains(body, "Secret flowlens-metrics-client") {
		t.Errorf("/metrics without a client certificate: %d %v %q, want 403 naming the scrape identity", code, err, body)
	}
	if code, body, err := httpservetest.Get(httpservetest.Client(t, pki.CA, pki.ClientCert, pki.ClientKey), base+"/metrics"); err != nil || code != 200 || !strings.Contains(body, "test_up 1") {
		t.Errorf("/metrics with a client certificate of the CA: %d %v\n%s", code, err, body)
	}
}

// kafkaCollector builds the Kafka collector's objects for a kafka exporter,
// spec.collector.metricsTLS tls and spec.metricsPlaintext plain.
func kafkaCollector(t *testing.T, tls *v1alpha1.MetricsTLS, plain bool) *CollectorObjects {
	t.Helper()
	spec := v1alpha1.FlowCollectorSpec{
		Exporters:        []v1alpha1.Exporter{{Type: v1alpha1.ExporterKafka, Kafka: &v1alpha1.KafkaExporter{Brokers: []string{"kafka:9092"}}}},
		Collector:        v1alpha1.CollectorSpec{MetricsTLS: tls},
		MetricsPlaintext: plain,
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
// certificates with a client CA, or (the default) /metrics only to a
// client certificate of the CA. Each setting has its own config hash; with
// spec.metricsPlaintext and no metricsTLS the collector has neither the
// flag nor the mounts.
func TestCollectorMetricsTLSServes(t *testing.T) {
	pki := receivertest.NewPKI(t)
	plain := kafkaCollector(t, nil, true)
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
	}{{"TLS", server}, {"mutual TLS", &mutual}, {"default", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			o := kafkaCollector(t, tc.tls, false)
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
			header := "spec.collector.metricsTLS"
			switch {
			case tc.tls == nil:
				want[MetricsTLSDir] = "secret flowlens-metrics-tls tls.crt:tls.crt,tls.key:tls.key,ca.crt:ca.crt (read-only true)"
				header = "its default metrics TLS (docs/security.md)"
			case tc.tls.ClientCASecretRef != nil:
				want[MetricsClientCADir] = "secret scrapers-ca ca.crt:ca.crt (read-only true)"
			}
			if got := collectorMounts(o); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("mounts\n%v\nwant\n%v", got, want)
			}
			if webConfigArg(o) != WebConfigPath {
				t.Fatalf("--web-config-file %q, want %q", webConfigArg(o), WebConfigPath)
			}
			web := o.ConfigMap.Data[WebConfigKey]
			if !strings.HasPrefix(web, "# Generated by the flowlens operator from "+header+": do not edit.\n") {
				t.Errorf("web configuration header:\n%s", web)
			}

			at := podFiles(t, map[string][]byte{WebConfigPath: []byte(web)}, pki, clientCAPath(tc.tls))
			if err := httpserve.CheckWebConfig("--web-config-file", at(WebConfigPath)); err != nil {
				t.Fatalf("the collector rejects the operator's web configuration: %v\n%s", err, web)
			}
			url := "https://" + serveMetrics(t, at(WebConfigPath)) + "/metrics"
			scraper := httpservetest.Client(t, pki.CA, "", "")
			switch {
			case tc.tls == nil:
				if code, _, err := httpservetest.Get(scraper, url); err != nil || code != http.StatusForbidden {
					t.Errorf("default: scrape without a client certificate: %d %v, want 403", code, err)
				}
				if p := o.Deployment.Spec.Template.Spec.Containers[0].ReadinessProbe; p.HTTPGet == nil || p.HTTPGet.Scheme == nil || *p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
					t.Errorf("default readiness probe %+v, want an HTTPS GET", p)
				}
				scraper = httpservetest.Client(t, pki.CA, pki.ClientCert, pki.ClientKey)
			case tc.tls.ClientCASecretRef != nil:
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

// TestCertManagerCertificates: with spec.tls.certManager, cert-manager
// issues the collector's, the metrics endpoints' and the scrape identity's
// Secrets, each with the names and the one usage the operator's own CA
// would give it.
func TestCertManagerCertificates(t *testing.T) {
	if CertManagerCertificates(collector(v1alpha1.FlowCollectorSpec{})) != nil {
		t.Error("Certificates without spec.tls.certManager")
	}
	fc := collector(v1alpha1.FlowCollectorSpec{Namespace: "obs", TLS: v1alpha1.TLSSpec{
		CertManager: &v1alpha1.CertManagerTLS{IssuerRef: v1alpha1.CertManagerIssuerRef{Name: "ca-issuer"}}}})
	got := map[string]string{}
	for _, u := range CertManagerCertificates(fc) {
		spec := u.Object["spec"].(map[string]any)
		if u.GetNamespace() != "obs" || spec["secretName"] != u.GetName() || u.GetOwnerReferences()[0].Name != v1alpha1.SingletonName ||
			spec["issuerRef"].(map[string]any)["name"] != "ca-issuer" {
			t.Errorf("Certificate %s/%s: %v", u.GetNamespace(), u.GetName(), u.Object)
		}
		got[u.GetName()] = fmt.Sprint(spec["commonName"], " ", spec["dnsNames"], " ", spec["usages"])
	}
	want := map[string]string{
		"flowlens-collector-tls": "flowlens-collector.obs.svc [flowlens-collector flowlens-collector.obs flowlens-collector.obs.svc flowlens-collector.obs.svc.cluster.local " +
			"flowlens-collector-kafka flowlens-collector-kafka.obs flowlens-collector-kafka.obs.svc flowlens-collector-kafka.obs.svc.cluster.local] [server auth digital signature]",
		"flowlens-metrics-tls": "flowlens-agent-metrics.obs.svc [flowlens-agent-metrics flowlens-agent-metrics.obs flowlens-agent-metrics.obs.svc flowlens-agent-metrics.obs.svc.cluster.local " +
			"flowlens-collector-kafka flowlens-collector-kafka.obs flowlens-collector-kafka.obs.svc flowlens-collector-kafka.obs.svc.cluster.local " +
			"flowlens-collector flowlens-collector.obs flowlens-collector.obs.svc flowlens-collector.obs.svc.cluster.local] [server auth digital signature]",
		"flowlens-metrics-client": "flowlens-metrics-scraper [flowlens-metrics-scraper] [client auth digital signature]",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Certificates\n%v\nwant\n%v", got, want)
	}
}

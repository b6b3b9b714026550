package dashboardslab

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/internal/shared/httpserve/httpservetest"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// TestScrapeIdentity: the metrics secure default with a real Prometheus.
// The operator's certificate code (certs.Manager, against a real
// kube-apiserver) issues the metrics serving certificate and Prometheus'
// scrape identity as the reconciler asks for them; a real agent serves
// /metrics with the operator's default web configuration
// (render.DefaultWebConfig, its paths moved to a temporary directory);
// Prometheus scrapes it twice: with the scrape identity (the target is up
// and flowlens_agent_* series arrive) and without a client certificate
// (down, lastError the 403).
func TestScrapeIdentity(t *testing.T) {
	netlab.Require(t)
	prom := findPrometheus(t)
	// The collector builds while the API server starts.
	collectorBin := make(chan string, 1)
	buildErr := make(chan error, 1)
	go func() {
		bin, err := buildCollector(t.TempDir())
		collectorBin <- bin
		buildErr <- err
	}()
	env := envtest.StartT(t, envtest.Options{})
	const ns = "flowlens"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// The leaves the reconciler's ensureCerts asks for (the metrics
	// endpoints' serving certificate and the scrape identity).
	m := &certs.Manager{Client: c, Reader: c, FieldOwner: "scrape-identity-test"}
	if _, err := m.Ensure(ctx, certs.Target{Namespace: ns, Leaves: []certs.Leaf{
		{Name: certs.MetricsTLSName, DNSNames: render.MetricsDNSNames(ns)},
		{Name: certs.MetricsClientName, DNSNames: []string{certs.MetricsScraper}, Client: true},
	}}); err != nil {
		t.Fatal(err)
	}

	// The Secrets, as the pods mount them.
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "metrics", "tls")
	scraperDir := filepath.Join(dir, "scraper")
	for name, d := range map[string]string{certs.MetricsTLSName: tlsDir, certs.MetricsClientName: scraperDir} {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, certs.BundleKey} {
			if len(s.Data[k]) == 0 {
				t.Fatalf("Secret %s has no %s", name, k)
			}
			if err := os.WriteFile(filepath.Join(d, k), s.Data[k], 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	scraper := parseCert(t, filepath.Join(scraperDir, corev1.TLSCertKey))
	if scraper.Subject.CommonName != certs.MetricsScraper || len(scraper.ExtKeyUsage) != 1 || scraper.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Fatalf("scrape identity: CN %q, ExtKeyUsage %v, want %q and ClientAuth alone", scraper.Subject.CommonName, scraper.ExtKeyUsage, certs.MetricsScraper)
	}
	serverName := render.MetricsDNSNames(ns)[2]

	// The operator's default web configuration, pointing at the copies.
	wc, err := render.DefaultWebConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(wc), "client_auth_type: "+"VerifyClientCertIfGiven") {
		t.Fatalf("the default web configuration is not VerifyClientCertIfGiven:\n%s", wc)
	}
	webConfig := filepath.Join(dir, "web-config.yml")
	if err := os.WriteFile(webConfig, []byte(strings.ReplaceAll(string(wc), render.MetricsTLSDir, tlsDir)), 0o600); err != nil {
		t.Fatal(err)
	}

	p := agenttest.NewPair(t)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--metrics-address=127.0.0.1:0", "--web-config-file="+webConfig)
	bin := <-collectorBin
	if err := <-buildErr; err != nil {
		t.Fatal(err)
	}
	scrapeClient := httpservetest.Client(t, filepath.Join(scraperDir, certs.BundleKey),
		filepath.Join(scraperDir, corev1.TLSCertKey), filepath.Join(scraperDir, corev1.TLSPrivateKeyKey))
	scrapeClient.Transport.(*http.Transport).TLSClientConfig.ServerName = serverName
	collector := startTLSCollector(t, bin, webConfig, scrapeClient)
	targets := map[string]string{h.A.MetricsAddr(): "flowlens_agent_", collector: "flowlens_collector_"}

	tlsJob := func(job, certLines string) string {
		return fmt.Sprintf("  - job_name: %s\n    scheme: https\n    tls_config:\n      ca_file: %s\n      server_name: %s\n%s    static_configs:\n      - targets: [%q, %q]\n",
			job, filepath.Join(scraperDir, certs.BundleKey), serverName, certLines, h.A.MetricsAddr(), collector)
	}
	pr := startPrometheusWith(t, prom,
		tlsJob("scrape-identity", fmt.Sprintf("      cert_file: %s\n      key_file: %s\n",
			filepath.Join(scraperDir, corev1.TLSCertKey), filepath.Join(scraperDir, corev1.TLSPrivateKeyKey)))+
			tlsJob("anonymous", ""))

	// Each target's health once all four have been scraped.
	type targetState struct {
		Health, LastError string
	}
	var got map[[2]string]targetState
	deadline := time.Now().Add(30 * time.Second)
	for {
		var data struct {
			ActiveTargets []struct {
				ScrapePool string            `json:"scrapePool"`
				Labels     map[string]string `json:"labels"`
				Health     string            `json:"health"`
				LastError  string            `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := pr.api(ctx, "/api/v1/targets", url.Values{"state": {"active"}}, &data); err != nil {
			t.Fatal(err)
		}
		got = map[[2]string]targetState{}
		for _, a := range data.ActiveTargets {
			if a.Health != "unknown" {
				got[[2]string{a.ScrapePool, a.Labels["instance"]}] = targetState{a.Health, a.LastError}
			}
		}
		if len(got) == 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("targets: %+v", got)
	const forbidden = "server returned HTTP status 403 Forbidden"
	for target, prefix := range targets {
		if s, ok := got[[2]string{"scrape-identity", target}]; !ok || s.Health != "up" || s.LastError != "" {
			t.Errorf("%s* at %s, with the scrape identity: %+v (scraped: %v), want up without error", prefix, target, s, ok)
		}
		if s, ok := got[[2]string{"anonymous", target}]; !ok || s.Health != "down" || s.LastError != forbidden {
			t.Errorf("%s* at %s, without a client certificate: %+v (scraped: %v), want down with %q", prefix, target, s, ok, forbidden)
		}
	}

	// What Prometheus stored: up 1 and 0, and each program's series from
	// the identified job only.
	now := time.Now()
	for target, prefix := range targets {
		for job, want := range map[string]float64{"scrape-identity": 1, "anonymous": 0} {
			ss, err := pr.query(ctx, fmt.Sprintf("up{job=%q,instance=%q}", job, target), now, now, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(ss) != 1 || len(ss[0].Points) != 1 || ss[0].Points[0][1] != want {
				t.Errorf("up{job=%q,instance=%q} = %v, want %v", job, target, ss, want)
			}
			ss, err = pr.query(ctx, fmt.Sprintf(`count({job=%q,instance=%q,__name__=~"%s.+"})`, job, target, prefix), now, now, 0)
			if err != nil {
				t.Fatal(err)
			}
			n := 0.0
			if len(ss) == 1 && len(ss[0].Points) == 1 {
				n = ss[0].Points[0][1]
			}
			t.Logf("job %s, %s: %v %s* series", job, target, n, prefix)
			if (n > 0) != (want == 1) {
				t.Errorf("job %s, %s: %v %s* series, want some: %v", job, target, n, prefix, want == 1)
			}
		}
	}
	ss, err := pr.query(ctx, `flowlens_agent_build_info{job="scrape-identity"}`, now, now, 0)
	if err != nil || len(ss) != 1 {
		t.Errorf("flowlens_agent_build_info of the identified job: %v %v, want one series", ss, err)
	}
}

// startTLSCollector runs the collector binary with plaintext gRPC on a
// loopback address and its metrics served as webConfig says, and returns
// its metrics address once scrape, a client with the scrape identity,
// reads its metrics. It is stopped when the test ends.
func startTLSCollector(t *testing.T, bin, webConfig string, scrape *http.Client) string {
	t.Helper()
	metrics := testkit.FreeAddr(t)
	args := []string{"--listen=" + testkit.FreeAddr(t), "--metrics-address=" + metrics, "--web-config-file=" + webConfig,
		"--output=json", "--k8s-enrich=false"}
	p := testkit.Start(t, fmt.Sprintf("collector %v", args), exec.Command(bin, args...))
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body, err := httpservetest.Get(scrape, "https://"+metrics+"/metrics")
		if err == nil && code == 200 && strings.Contains(body, "flowlens_collector_") {
			return metrics
		}
		select {
		case <-p.Done():
			t.Fatalf("collector exited: %v", p.Err())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector metrics not served on %s after 15s: %d %v", metrics, code, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func parseCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("no PEM in %s", file)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

package httpserve_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/flowlens/flowlens/internal/shared/httpserve"
	"github.com/flowlens/flowlens/internal/shared/httpserve/httpservetest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// serve serves a registry with test_up 1 as webConfig says.
func serve(t *testing.T, webConfig string) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_up", Help: "Up."})
	g.Set(1)
	reg.MustRegister(g)
	srv, err := httpserve.Listen("127.0.0.1:0", webConfig, httpserve.Handler(httpserve.Options{Gatherer: reg}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return srv.Addr().String()
}

func TestTLS(t *testing.T) {
	pki := receivertest.NewPKI(t)
	addr := serve(t, httpservetest.WebConfig(t, pki, false))

	code, body, err := httpservetest.Get(httpservetest.Client(t, pki.CA, "", ""), "https://"+addr+"/metrics")
	if err != nil || code != 200 || !strings.Contains(body, "test_up 1") {
		t.Errorf("TLS scrape trusting the CA: %d %v\n%s", code, err, body)
	}
	// Plain HTTP gets Go's "client sent an HTTP request to an HTTPS
	// server", never the metrics.
	code, body, err = httpservetest.Get(http.DefaultClient, "http://"+addr+"/metrics")
	if err == nil && (code != http.StatusBadRequest || strings.Contains(body, "test_up")) {
		t.Errorf("plaintext scrape of a TLS server: %d\n%s", code, body)
	}
	// A scraper that does not trust the CA refuses the server.
	if _, _, err := httpservetest.Get(httpservetest.Client(t, pki.OtherCA, "", ""), "https://"+addr+"/metrics"); err == nil ||
		!strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("scrape trusting another CA: %v, want an unknown authority error", err)
	}
}

func TestMutualTLS(t *testing.T) {
	pki := receivertest.NewPKI(t)
	url := "https://" + serve(t, httpservetest.WebConfig(t, pki, true)) + "/metrics"

	code, body, err := httpservetest.Get(httpservetest.Client(t, pki.CA, pki.ClientCert, pki.ClientKey), url)
	if err != nil || code != 200 || !strings.Contains(body, "test_up 1") {
		t.Errorf("mTLS scrape with the client certificate: %d %v\n%s", code, err, body)
	}
	if code, _, err := httpservetest.Get(httpservetest.Client(t, pki.CA, "", ""), url); err == nil {
		t.Errorf("scrape without a client certificate got %d, want the handshake refused", code)
	}
	if code, _, err := httpservetest.Get(httpservetest.Client(t, pki.CA, pki.OtherCert, pki.OtherKey), url); err == nil {
		t.Errorf("scrape with a certificate of another CA got %d, want the handshake refused", code)
	}
}

func TestBadWebConfig(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.crt")
	for name, yaml := range map[string]string{
		"missing cert": "tls_server_config:\n  cert_file: " + missing + "\n  key_file: " + missing + "\n",
		"not yaml":     "tls_server_config: [",
		"unknown key":  "tls_server_config:\n  cert: x\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := httpservetest.Write(t, yaml)
			err := httpserve.CheckWebConfig("--web-config-file", f)
			if err == nil || !strings.HasPrefix(err.Error(), `invalid --web-config-file "`+f+`": `) {
				t.Errorf("CheckWebConfig: %v, want an error naming the flag and file", err)
			}
			if _, err := httpserve.Listen("127.0.0.1:0", f, http.NotFoundHandler(), nil); err == nil {
				t.Error("Listen with a bad web config succeeded")
			}
		})
	}
	if err := httpserve.CheckWebConfig("--web-config-file", ""); err != nil {
		t.Errorf("no web config (plain HTTP): %v", err)
	}
	if err := httpserve.CheckWebConfig("--web-config-file", missing); err == nil {
		t.Error("a missing web config file passed")
	}
}

// TestVerifyClientCertIfGiven: the operator's default web configuration
// (client_auth_type VerifyClientCertIfGiven) over real TLS handshakes. The
// kubelet's probes (no certificate) get /healthz and /readyz; /metrics
// needs a certificate of the CA with ExtKeyUsage ClientAuth, and a
// certificate that does not verify fails the handshake.
func TestVerifyClientCertIfGiven(t *testing.T) {
	pki := receivertest.NewPKI(t)
	base := "https://" + serve(t, httpservetest.WebConfigClientAuth(t, pki, httpserve.VerifyIfGiven))
	anonymous := httpservetest.Client(t, pki.CA, "", "")

	code, body, err := httpservetest.Get(anonymous, base+"/metrics")
	const want = "forbidden: /metrics needs a client certificate of the flowlens CA (the web configuration's client_ca_file), " +
		"e.g. Prometheus' scrape identity, the Secret flowlens-metrics-client (docs/security.md)\n"
	if err != nil || code != http.StatusForbidden || body != want {
		t.Errorf("/metrics without a client certificate: %d %v %q, want 403 %q", code, err, body, want)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body, err := httpservetest.Get(anonymous, base+path); err != nil || code != 200 || body != "ok\n" {
			t.Errorf("%s without a client certificate (the kubelet's probe): %d %v %q, want 200 ok", path, code, err, body)
		}
	}
	// Any other path is refused as /metrics is.
	if code, _, _ := httpservetest.Get(anonymous, base+"/other"); code != http.StatusForbidden {
		t.Errorf("/other without a client certificate: %d, want 403", code)
	}

	scraper := httpservetest.Client(t, pki.CA, pki.ClientCert, pki.ClientKey)
	if code, body, err := httpservetest.Get(scraper, base+"/metrics"); err != nil || code != 200 || !strings.Contains(body, "test_up 1") {
		t.Errorf("/metrics with the CA's client certificate: %d %v\n%s", code, err, body)
	}
	if code, _, err := httpservetest.Get(scraper, base+"/other"); err != nil || code != http.StatusNotFound {
		t.Errorf("/other with the client certificate: %d %v, want 404", code, err)
	}

	// A certificate of another CA, or one of the CA without ClientAuth
	// (the server's own, ServerAuth alone), fails the handshake. (Go's
	// client leaves out a certificate of a CA the server does not name:
	// present it anyway, as another client may.)
	if code, _, err := httpservetest.Get(presentAnyway(httpservetest.Client(t, pki.CA, pki.OtherCert, pki.OtherKey)), base+"/metrics"); err == nil {
		t.Errorf("/metrics with a certificate of another CA: %d, want the handshake refused", code)
	} else if !strings.Contains(err.Error(), "remote error: tls: bad certificate") && !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Errorf("/metrics with a certificate of another CA: %v, want a bad or unknown certificate alert", err)
	} else {
		t.Logf("another CA's certificate: %v", err)
	}
	if code, _, err := httpservetest.Get(presentAnyway(httpservetest.Client(t, pki.CA, pki.ServerCert, pki.ServerKey)), base+"/metrics"); err == nil {
		t.Errorf("/metrics with a certificate without ClientAuth: %d, want the handshake refused", code)
	} else if !strings.Contains(err.Error(), "bad certificate") && !strings.Contains(err.Error(), "unsupported certificate") {
		t.Errorf("/metrics with a certificate without ClientAuth: %v, want a bad or unsupported certificate alert", err)
	} else {
		t.Logf("a certificate without ClientAuth: %v", err)
	}
}

// presentAnyway has c present its client certificate whatever CAs the
// server asks for.
func presentAnyway(c *http.Client) *http.Client {
	cfg := c.Transport.(*http.Transport).TLSClientConfig
	cert := cfg.Certificates[0]
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	return c
}

// TestAllowedSANsPanicWithoutCertificate shows why the web configuration
// must not combine client_allowed_sans with VerifyClientCertIfGiven:
// exporter-toolkit then sets a VerifyPeerCertificate that indexes the
// first client certificate, and Go calls it with none when the client
// (the kubelet's probe) sent none: the handshake panics. Listen and
// CheckWebConfig refuse such a file.
func TestAllowedSANsPanicWithoutCertificate(t *testing.T) {
	pki := receivertest.NewPKI(t)
	cfg, err := web.ConfigToTLSConfig(&web.TLSConfig{
		TLSCertPath: pki.ServerCert, TLSKeyPath: pki.ServerKey, ClientCAs: pki.CA,
		ClientAuth: httpserve.VerifyIfGiven, ClientAllowedSans: []string{"flowlens-metrics-scraper"},
		MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, cli := net.Pipe()
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover(); srv.Close() }()
		_ = tls.Server(srv, cfg).Handshake()
	}()
	roots := x509.NewCertPool()
	ca, _ := os.ReadFile(pki.CA)
	roots.AppendCertsFromPEM(ca)
	_ = tls.Client(cli, &tls.Config{RootCAs: roots, ServerName: "localhost"}).Handshake()
	cli.Close()
	p := <-panicked
	if p == nil || !strings.Contains(fmt.Sprint(p), "index out of range [0] with length 0") {
		t.Fatalf("handshake without a client certificate under client_allowed_sans and VerifyClientCertIfGiven: recovered %v, want exporter-toolkit's index out of range panic", p)
	}

	f := httpservetest.Write(t, "tls_server_config:\n  cert_file: "+pki.ServerCert+"\n  key_file: "+pki.ServerKey+
		"\n  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: "+pki.CA+"\n  client_allowed_sans: [flowlens-metrics-scraper]\n")
	const want = `client_allowed_sans needs client_auth_type RequireAndVerifyClientCert, not "VerifyClientCertIfGiven"`
	if err := httpserve.CheckWebConfig("--web-config-file", f); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckWebConfig: %v, want %q", err, want)
	}
	if _, err := httpserve.Listen("127.0.0.1:0", f, http.NotFoundHandler(), nil); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Listen: %v, want %q", err, want)
	}
}

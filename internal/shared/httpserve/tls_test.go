package httpserve_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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

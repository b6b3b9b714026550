package main

import (
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/shared/httpserve/httpservetest"
	"github.com/flowlens/flowlens/internal/shared/version"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// The collector's /metrics carries flowlens_collector_build_info.
func TestBuildInfo(t *testing.T) {
	a, _, _ := startFull(t, "--output", "none")
	labels := "goversion=" + runtime.Version() + ",revision=unknown,version=" + version.Version
	if v, ok := sample(scrape(t, a), "flowlens_collector_build_info", labels); !ok || v != 1 {
		t.Errorf("flowlens_collector_build_info{%s} = %v (present %v), want 1", labels, v, ok)
	}
}

// --web-config-file with client certificates required: a scrape with the
// CA and a client certificate gets the metrics, plain HTTP and a client
// without a certificate do not.
func TestMetricsOverMutualTLS(t *testing.T) {
	pki := receivertest.NewPKI(t)
	a, _, _ := startFull(t, "--output", "none", "--web-config-file", httpservetest.WebConfig(t, pki, true))
	url := "https://" + a.Metrics.String()

	code, body, err := httpservetest.Get(httpservetest.Client(t, pki.CA, pki.ClientCert, pki.ClientKey), url+"/metrics")
	if err != nil || code != 200 || !strings.Contains(body, "flowlens_collector_build_info{") {
		t.Errorf("mTLS scrape: %d %v\n%s", code, err, body)
	}
	if code, _, err := httpservetest.Get(httpservetest.Client(t, pki.CA, pki.ClientCert, pki.ClientKey), url+"/readyz"); err != nil || code != 200 {
		t.Errorf("mTLS /readyz: %d %v", code, err)
	}
	if code, body, err := httpservetest.Get(http.DefaultClient, "http://"+a.Metrics.String()+"/metrics"); err == nil &&
		(code != http.StatusBadRequest || strings.Contains(body, "flowlens_collector")) {
		t.Errorf("plaintext scrape of the TLS endpoint: %d\n%s", code, body)
	}
	if code, _, err := httpservetest.Get(httpservetest.Client(t, pki.CA, "", ""), url+"/metrics"); err == nil {
		t.Errorf("scrape without a client certificate got %d, want the handshake refused", code)
	}
}

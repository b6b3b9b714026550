package agent_test

import (
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/shared/httpserve/httpservetest"
	"github.com/flowlens/flowlens/internal/shared/version"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// A real agent with --web-config-file requiring client certificates: a
// scrape trusting the CA with a client certificate gets the metrics, with
// flowlens_agent_build_info; plain HTTP and a client without a certificate
// get nothing.
func TestMetricsOverMutualTLS(t *testing.T) {
	p := agenttest.NewPair(t)
	pki := receivertest.NewPKI(t)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--metrics-address=127.0.0.1:0",
		"--web-config-file="+httpservetest.WebConfig(t, pki, true))
	url := "https://" + h.A.MetricsAddr() + "/metrics"

	code, body, err := httpservetest.Get(httpservetest.Client(t, pki.CA, pki.ClientCert, pki.ClientKey), url)
	want := `flowlens_agent_build_info{goversion="` + runtime.Version() + `",revision="unknown",version="` + version.Version + `"} 1`
	if err != nil || code != 200 || !strings.Contains(body, want) {
		t.Errorf("mTLS scrape: %d %v, want %s in:\n%s", code, err, want, body)
	}
	if code, body, err := httpservetest.Get(http.DefaultClient, "http://"+h.A.MetricsAddr()+"/metrics"); err == nil &&
		(code != http.StatusBadRequest || strings.Contains(body, "flowlens_agent")) {
		t.Errorf("plaintext scrape of the TLS endpoint: %d\n%s", code, body)
	}
	if code, _, err := httpservetest.Get(httpservetest.Client(t, pki.CA, "", ""), url); err == nil {
		t.Errorf("scrape without a client certificate got %d, want the handshake refused", code)
	}
}

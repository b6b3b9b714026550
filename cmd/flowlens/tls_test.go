package main

import (
	"context"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// The history is served with the receiver's TLS: a collector with mTLS
// answers observe with the CA and a client certificate, and refuses it
// without one.
func TestObserveMTLS(t *testing.T) {
	pki := receivertest.NewPKI(t)
	col := startCollector(t, "--tls-cert="+pki.ServerCert, "--tls-key="+pki.ServerKey, "--tls-client-ca="+pki.CA)
	a, _ := lab()
	// In as an agent would: the gRPC exporter over mTLS.
	sendTLS(t, col, pki, a)
	out := observeOut(t, "--server", col, "--tls-ca", pki.CA, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey, "-o", "json")
	if got := strings.Join(jsonNames(t, out), " "); got != "f1 f2 f5" {
		t.Errorf("over mTLS: %q", got)
	}
	var stdout, stderr strings.Builder
	if code := run(context.Background(), []string{"observe", "--server", col, "--tls-ca", pki.CA}, nil, &stdout, &stderr); code != 1 || stdout.Len() != 0 {
		t.Errorf("without a client certificate: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

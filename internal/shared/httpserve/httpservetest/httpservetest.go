// Package httpservetest helps tests scrape a metrics server served over TLS
// (package httpserve with a --web-config-file): it writes exporter-toolkit
// web configuration files for the certificates of a receivertest.PKI and
// builds scraping clients that trust its CA, with or without a client
// certificate.
package httpservetest

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// WebConfig writes a web configuration file serving pki's server
// certificate; with mutual, clients must present a certificate of pki's CA.
func WebConfig(t testing.TB, pki *receivertest.PKI, mutual bool) string {
	t.Helper()
	yaml := "tls_server_config:\n  cert_file: " + pki.ServerCert + "\n  key_file: " + pki.ServerKey + "\n"
	if mutual {
		yaml += "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: " + pki.CA + "\n"
	}
	return Write(t, yaml)
}

// WebConfigClientAuth writes a web configuration file serving pki's server
// certificate, verifying clients' certificates against pki's CA as
// clientAuthType (an exporter-toolkit client_auth_type) says.
func WebConfigClientAuth(t testing.TB, pki *receivertest.PKI, clientAuthType string) string {
	t.Helper()
	return Write(t, "tls_server_config:\n  cert_file: "+pki.ServerCert+"\n  key_file: "+pki.ServerKey+
		"\n  client_auth_type: "+clientAuthType+"\n  client_ca_file: "+pki.CA+"\n")
}

// Write writes yaml to a web configuration file in a temporary directory.
func Write(t testing.TB, yaml string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "web-config.yml")
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// Client trusts caFile and, when certFile is not "", presents that client
// certificate.
func Client(t testing.TB, caFile, certFile, keyFile string) *http.Client {
	t.Helper()
	cfg := &tls.Config{RootCAs: x509.NewCertPool()}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.RootCAs.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", caFile)
	}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

// Get GETs url with c: the status and body, or the transport's error (a
// refused TLS handshake).
func Get(c *http.Client, url string) (int, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

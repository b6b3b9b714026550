package otlp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// New refuses what cannot work at startup, naming the problem; the rest
// of the exporter is tested against the OpenTelemetry Collector's
// receiver in test/otlp.
func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "otlp exporter: no endpoint"},
		{Config{Endpoint: "otel:4317", Protocol: "http/json"}, `otlp exporter: protocol "http/json": must be grpc or http`},
		{Config{Endpoint: "otel", Protocol: "http"}, `otlp exporter: endpoint "otel": address otel: missing port in address`},
		{Config{Endpoint: "otel:4317", TLSCA: filepath.Join(dir, "missing.pem")}, "otlp exporter: read CA: open " + dir},
		{Config{Endpoint: "otel:4317", TLSCA: notPEM}, "otlp exporter: no certificate in " + notPEM},
		{Config{Endpoint: "otel:4317", TLSCert: notPEM}, "otlp exporter: TLS certificate and key must be given together"},
	} {
		e, err := New(tc.cfg)
		if err == nil {
			e.Close()
			t.Errorf("%+v: no error", tc.cfg)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v:\n got  %v\n want %s...", tc.cfg, err, tc.want)
		}
	}
}

// The HTTP Retry-After header: seconds or an HTTP date; anything else is
// no delay (the exporter's own backoff).
func TestRetryAfter(t *testing.T) {
	for v, want := range map[string]bool{"": false, "3": true, "-1": false, "soon": false, "Wed, 21 Oct 2099 07:28:00 GMT": true} {
		if got := retryAfter(v) > 0; got != want {
			t.Errorf("retryAfter(%q) = %v", v, retryAfter(v))
		}
	}
}

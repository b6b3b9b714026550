package otlp

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
	"github.com/flowlens/flowlens/pkg/flow"
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

// gRPC sends a request from the encoder's own buffer (no copy): while gRPC
// holds it (a message still queued after its call timed out), the next
// request goes into another buffer and the held one keeps its bytes; a
// buffer gRPC gave back is reused.
func TestHeldRequestNotOverwritten(t *testing.T) {
	recs := exportertest.Records(20)
	e := newEncoder("node-1", "v1")
	encode := func(observed uint64, recs []flow.Record) *reqBuf {
		e.begin(observed)
		for i := range recs {
			e.appendFlow(&recs[i])
		}
		return e.finish()
	}
	first := encode(1, recs[:10])
	sent := bytes.Clone(first.req)
	held, err := rawCodec{}.Marshal(&rawMessage{req: first}) // gRPC's reference
	if err != nil {
		t.Fatal(err)
	}
	second := encode(2, recs[10:])
	if second == first {
		t.Fatal("a buffer gRPC holds was reused")
	}
	if got := held.Materialize(); !bytes.Equal(got, sent) {
		t.Fatal("the request gRPC holds changed")
	}
	held.Free()
	if n := first.held.Load(); n != 0 {
		t.Fatalf("%d references left after gRPC freed the request", n)
	}
	if third := encode(3, recs); third != second {
		t.Error("a buffer nobody holds was not reused")
	}
}

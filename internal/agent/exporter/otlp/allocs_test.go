package otlp

import (
	"io"
	"log/slog"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
)

// TestNoAllocationsPerFlow: in steady state the exporter allocates nothing
// per flow, over either protocol, compressed or not; what gRPC and net/http
// allocate per request does not grow with the records in it
// (exportertest.MarginalAllocs). The receiver is a child process.
func TestNoAllocationsPerFlow(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct{ protocol, compression string }{
		{"grpc", "none"}, {"grpc", "gzip"}, {"http", "none"}, {"http", "gzip"},
	} {
		t.Run("protocol="+tc.protocol+"/compression="+tc.compression, func(t *testing.T) {
			addr := discardReceiver(t, tc.protocol)
			e, err := New(Config{Endpoint: addr, Protocol: tc.protocol, Compression: tc.compression,
				NodeName: "node-1", Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			exportertest.NoAllocsPerFlow(t, e, nil)
			if n := e.Stats.RejectedFlows.Load() + e.Stats.FailedFlows.Load(); n > 0 {
				t.Fatalf("%d flows rejected or failed", n)
			}
		})
	}
}

package otlp

import (
	"bytes"
	stdgzip "compress/gzip"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"testing"

	"github.com/klauspost/compress/gzip"
	grpcgo "google.golang.org/grpc"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
)

// Benchmarks of the OTLP export path (`make bench`). The correctness
// tests, against the OpenTelemetry Collector's receiver, are in test/otlp;
// the receiver here only discards what it gets, in a child process (this
// test binary again), so that the CPU and allocations measured are the
// agent's side alone: encode + send per flow.

// discardEnv makes the test binary a discarding receiver (TestMain).
const discardEnv = "FLOWLENS_OTLP_BENCH_DISCARD"

func TestMain(m *testing.M) {
	if protocol := os.Getenv(discardEnv); protocol != "" {
		serveDiscard(protocol)
		return
	}
	os.Exit(m.Run())
}

// TestEncodeAllocatesNothing: once its buffer has grown, encoding a flow
// allocates nothing (the CPU figures are in the benchmarks).
func TestEncodeAllocatesNothing(t *testing.T) {
	recs := exportertest.Records(1000)
	recs[2].XlatDstAddr, recs[2].XlatDstPort = netip.MustParseAddr("10.0.0.9"), 80
	e := newEncoder("node-1", "v1")
	encode := func() {
		e.begin(1)
		for i := range recs {
			e.appendFlow(&recs[i])
		}
		e.finish()
	}
	encode()
	if n := testing.AllocsPerRun(10, encode); n != 0 {
		t.Errorf("%v allocations per 1000 flows, want 0", n)
	}
}

// BenchmarkEncode is Record → ExportLogsServiceRequest bytes, 1000 flows
// of exportertest's mix per request.
func BenchmarkEncode(b *testing.B) {
	const n = exportertest.Batch
	recs := exportertest.Records(n)
	e := newEncoder("node-1", "v1")
	var size int
	b.ReportAllocs()
	for b.Loop() {
		e.begin(1)
		for i := range recs {
			e.appendFlow(&recs[i])
		}
		size = len(e.finish().req)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/flow")
	b.ReportMetric(float64(size)/n, "wire-bytes/flow")
}

// BenchmarkGzip compresses a 1000-flow request of exportertest's mix, as
// --otlp-compression gzip does, with the standard library's and
// klauspost/compress's gzip at several levels: CPU per flow and
// compressed bytes per flow, the measurements behind gzipLevel. Each
// output is checked to decode (compress/gzip) to the request.
func BenchmarkGzip(b *testing.B) {
	recs := exportertest.Records(exportertest.Batch)
	e := newEncoder("node-1", "v1")
	e.begin(1)
	for i := range recs {
		e.appendFlow(&recs[i])
	}
	req := e.finish().req
	var buf bytes.Buffer
	std := func(level int) gzipWriter { w, _ := stdgzip.NewWriterLevel(&buf, level); return w }
	fast := func(level int) gzipWriter { w, _ := gzip.NewWriterLevel(&buf, level); return w }
	for _, tc := range []struct {
		name string
		w    gzipWriter
	}{
		{"stdlib/level=1", std(stdgzip.BestSpeed)}, {"stdlib/level=6", std(stdgzip.DefaultCompression)},
		{"klauspost/level=1", fast(gzip.BestSpeed)}, {"klauspost/level=2", fast(2)}, {"klauspost/level=3", fast(3)},
		{"klauspost/level=5", fast(5)}, {"klauspost/huffman-only", fast(gzip.HuffmanOnly)},
		{"klauspost/stateless", fast(gzip.StatelessCompression)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				tc.w.Reset(&buf)
				tc.w.Write(req)
				tc.w.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/exportertest.Batch, "ns/flow")
			b.ReportMetric(float64(buf.Len())/exportertest.Batch, "gzip-bytes/flow")
			zr, err := stdgzip.NewReader(&buf)
			if err != nil {
				b.Fatal(err)
			}
			if got, err := io.ReadAll(zr); err != nil || !bytes.Equal(got, req) {
				b.Fatalf("does not decode to the request: %v", err)
			}
		})
	}
}

// gzipWriter is what the standard library's and klauspost's writers share.
type gzipWriter interface {
	io.WriteCloser
	Reset(io.Writer)
}

// BenchmarkEviction is the OTLP exporter's cost per flow at 100k flows per
// eviction (exportertest.Run: the flows and figures of the other
// exporters' benchmarks), over gRPC and HTTP, with and without gzip, to a
// receiver on loopback that discards what it gets, in a child process: the
// CPU and allocations per flow are the exporter's alone. Export returns
// once the receiver answered every request: nothing more to wait for.
func BenchmarkEviction(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct{ protocol, compression string }{
		{"grpc", "none"}, {"grpc", "gzip"}, {"http", "none"}, {"http", "gzip"},
	} {
		b.Run("protocol="+tc.protocol+"/compression="+tc.compression, func(b *testing.B) {
			addr := discardReceiver(b, tc.protocol)
			e, err := New(Config{Endpoint: addr, Protocol: tc.protocol, Compression: tc.compression,
				NodeName: "node-1", Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			exportertest.Run(b, e, nil)
			if n := e.Stats.RejectedFlows.Load() + e.Stats.FailedFlows.Load(); n > 0 {
				b.Fatalf("%d flows rejected or failed: not the path to measure", n)
			}
		})
	}
}

// discardReceiver starts the discarding receiver in a child process and
// returns its address.
func discardReceiver(b testing.TB, protocol string) string {
	return exportertest.Child(b, discardEnv+"="+protocol)
}

// serveDiscard serves OTLP logs on loopback, answering every request with
// an empty ExportLogsServiceResponse without decoding it; it prints its
// address and runs until stdin closes.
func serveDiscard(protocol string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	if protocol == "http" {
		go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
	} else {
		srv := grpcgo.NewServer(grpcgo.ForceServerCodecV2(rawCodec{}), grpcgo.UnknownServiceHandler(func(_ any, s grpcgo.ServerStream) error {
			var m rawMessage
			if err := s.RecvMsg(&m); err != nil {
				return err
			}
			return s.SendMsg(&rawMessage{})
		}))
		go srv.Serve(l)
	}
	fmt.Println(l.Addr())
	io.Copy(io.Discard, os.Stdin)
}

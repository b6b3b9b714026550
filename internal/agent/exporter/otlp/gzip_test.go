package otlp

import (
	"bytes"
	stdgzip "compress/gzip"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"

	grpcgo "google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
)

// With --otlp-compression gzip, each request goes compressed on the wire
// (gRPC's grpc-encoding gzip, HTTP's Content-Encoding: gzip) and decodes,
// with the standard library's gzip (net/http's server: compress/gzip;
// gRPC's server: grpc/encoding/gzip's decompressor), to exactly the bytes
// of the uncompressed request: 3 requests of 1000 flows, so the pooled
// writers are reused and each request spans many deflate blocks. The
// exact OTLP content is checked against the Collector's receiver in
// test/otlp.
func TestGzipDecodedExactly(t *testing.T) {
	if c, ok := encoding.GetCompressor("gzip").(*grpcGzip); !ok {
		t.Fatalf("gRPC's gzip compressor is %T, not this package's", c)
	}
	recs := exportertest.Records(3 * DefaultBatchFlows)
	for _, protocol := range []string{"grpc", "http"} {
		t.Run(protocol, func(t *testing.T) {
			rcv := &gzipReceiver{}
			addr := rcv.start(t, protocol)
			e, err := New(Config{Endpoint: addr, Protocol: protocol, Compression: "gzip", NodeName: "node-1",
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if err := e.Export(context.Background(), recs); err != nil {
				t.Fatal(err)
			}
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			if len(rcv.reqs) != 3 {
				t.Fatalf("%d requests received, want 3", len(rcv.reqs))
			}
			enc := newEncoder("node-1", "")
			for i, got := range rcv.reqs {
				if got.encoding != "gzip" {
					t.Errorf("request %d: encoding %q, want gzip", i, got.encoding)
				}
				// The request as sent uncompressed: the same flows, its
				// observed time (the export's) read back from it.
				enc.begin(observedTime(t, got.body))
				for j := range DefaultBatchFlows {
					enc.appendFlow(&recs[i*DefaultBatchFlows+j])
				}
				want := enc.finish().req
				if !bytes.Equal(got.body, want) {
					t.Errorf("request %d: %d bytes decoded, not the %d of the request", i, len(got.body), len(want))
				}
				if got.wire == 0 || got.wire > len(want)/10 {
					t.Errorf("request %d: %d bytes on the wire for %d: not compressed", i, got.wire, len(want))
				}
			}
		})
	}
}

// observedTime is the observed_time_unix_nano of a request's last log
// record (every record of a request has the export's).
func observedTime(t *testing.T, req []byte) uint64 {
	t.Helper()
	rl := field(req, fReqResourceLogs, protowire.BytesType)
	lr := field(field(rl, fRLScopeLogs, protowire.BytesType), fSLLogRecords, protowire.BytesType)
	v, n := protowire.ConsumeFixed64(field(lr, fLRObservedTime, protowire.Fixed64Type))
	if n < 0 {
		t.Fatal("no observed time in the request")
	}
	return v
}

// gzipReceiver is an OTLP receiver on loopback that keeps each request's
// decompressed body, its content encoding and its size on the wire.
type gzipReceiver struct {
	mu   sync.Mutex
	reqs []gzipRequest
}

type gzipRequest struct {
	encoding string
	wire     int // compressed bytes
	body     []byte
}

func (r *gzipReceiver) start(t *testing.T, protocol string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if protocol == "http" {
		srv := &http.Server{Handler: http.HandlerFunc(r.serveHTTP)}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		return l.Addr().String()
	}
	srv := grpcgo.NewServer(grpcgo.ForceServerCodecV2(rawCodec{}), grpcgo.StatsHandler(r),
		grpcgo.UnknownServiceHandler(func(_ any, s grpcgo.ServerStream) error {
			var m rawMessage
			if err := s.RecvMsg(&m); err != nil {
				return err
			}
			r.mu.Lock()
			r.reqs[len(r.reqs)-1].body = m.b // HandleRPC has added it
			r.mu.Unlock()
			return s.SendMsg(&rawMessage{})
		}))
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return l.Addr().String()
}

// serveHTTP decompresses with compress/gzip, as the Collector does.
func (r *gzipReceiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	raw, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	zr, err := stdgzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(zr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, gzipRequest{encoding: req.Header.Get("Content-Encoding"), wire: len(raw), body: body})
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
}

// HandleRPC records a gRPC request's compression (grpc-encoding) and its
// compressed size, before the handler reads the message.
func (r *gzipReceiver) HandleRPC(_ context.Context, s stats.RPCStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch s := s.(type) {
	case *stats.InHeader:
		r.reqs = append(r.reqs, gzipRequest{encoding: s.Compression})
	case *stats.InPayload:
		r.reqs[len(r.reqs)-1].wire = s.CompressedLength
	}
}

func (r *gzipReceiver) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (r *gzipReceiver) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (r *gzipReceiver) HandleConn(context.Context, stats.ConnStats)                       {}

package otlp

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowlens/flowlens/pkg/tlsclient"

	"github.com/klauspost/compress/gzip"
	grpcgo "google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// exportMethod is OTLP's logs service method (opentelemetry-proto
// logs_service.proto).
const exportMethod = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"

// grpcSender calls LogsService/Export with the encoded request as is.
type grpcSender struct {
	conn      *grpcgo.ClientConn
	md        metadata.MD
	opts      []grpcgo.CallOption
	req, resp rawMessage // reused: the exporter sends one request at a time
}

func newGRPCSender(cfg Config, tc *tls.Config) (*grpcSender, error) {
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	// A write buffer of 256 KiB (gRPC: 32 KiB) sends a request of ~1 MB in
	// a few writes rather than dozens.
	conn, err := grpcgo.NewClient(cfg.Endpoint, grpcgo.WithTransportCredentials(creds), grpcgo.WithUserAgent("flowlens-agent"),
		grpcgo.WithWriteBufferSize(256<<10))
	if err != nil {
		return nil, err
	}
	s := &grpcSender{conn: conn, md: metadata.New(cfg.Headers), opts: []grpcgo.CallOption{grpcgo.ForceCodecV2(rawCodec{})}}
	if cfg.Compression == "gzip" { // klauspost/compress's, registered in gzip.go
		s.opts = append(s.opts, grpcgo.UseCompressor("gzip"))
	}
	return s, nil
}

func (s *grpcSender) send(ctx context.Context, req *reqBuf) (int64, string, error) {
	if len(s.md) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, s.md)
	}
	s.req.req, s.resp.b = req, nil
	// Not WaitForReady: while the receiver is down this fails at once
	// (Unavailable) and the exporter's backoff paces the attempts.
	if err := s.conn.Invoke(ctx, exportMethod, &s.req, &s.resp, s.opts...); err != nil {
		return 0, "", grpcError(err)
	}
	return parseResponse(s.resp.b)
}

func (s *grpcSender) close() error { return s.conn.Close() }

// grpcError classifies a failed call as OTLP says: Canceled,
// DeadlineExceeded, Aborted, OutOfRange, Unavailable and DataLoss are
// retried; ResourceExhausted only when the receiver sent RetryInfo (it
// will recover); the rest is a refusal.
func grpcError(err error) error {
	st := status.Convert(err)
	after := retryInfo(st)
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		return &sendError{retryable: true, after: after, err: err}
	case codes.ResourceExhausted:
		return &sendError{retryable: after > 0, after: after, err: err}
	}
	return &sendError{err: err}
}

// retryInfo is the delay of a google.rpc.RetryInfo detail of st, 0 if none
// (decoded by hand: RetryInfo{retry_delay = 1: Duration{seconds = 1,
// nanos = 2}}).
func retryInfo(st *status.Status) time.Duration {
	for _, d := range st.Proto().GetDetails() {
		if d.GetTypeUrl() != "type.googleapis.com/google.rpc.RetryInfo" {
			continue
		}
		dur := field(d.GetValue(), 1, protowire.BytesType)
		secs, _ := protowire.ConsumeVarint(field(dur, 1, protowire.VarintType))
		nanos, _ := protowire.ConsumeVarint(field(dur, 2, protowire.VarintType))
		return time.Duration(int64(secs))*time.Second + time.Duration(int32(nanos))
	}
	return 0
}

// field returns the last occurrence of field num of type typ in the
// message b: a varint's bytes, or a length-delimited field's content; nil
// when absent or b is malformed.
func field(b []byte, num protowire.Number, typ protowire.Type) []byte {
	var out []byte
	for len(b) > 0 {
		n, t, k := protowire.ConsumeTag(b)
		if k < 0 {
			return nil
		}
		b = b[k:]
		k = protowire.ConsumeFieldValue(n, t, b)
		if k < 0 {
			return nil
		}
		if n == num && t == typ {
			out = b[:k]
			if t == protowire.BytesType {
				out, _ = protowire.ConsumeBytes(out)
			}
		}
		b = b[k:]
	}
	return out
}

// parseResponse reads an ExportLogsServiceResponse's partial success.
func parseResponse(b []byte) (rejected int64, msg string, err error) {
	ps := field(b, fPartialSuccess, protowire.BytesType)
	if ps == nil {
		return 0, "", nil
	}
	if v := field(ps, fPartialRejected, protowire.VarintType); v != nil {
		n, _ := protowire.ConsumeVarint(v)
		rejected = int64(n)
	}
	return rejected, string(field(ps, fPartialErrorText, protowire.BytesType)), nil
}

// reqBuf is a request's buffer, reused from request to request. The gRPC
// sender hands it to gRPC without a copy (rawCodec), and gRPC may hold it
// after the call returned (a message still queued when the call timed
// out): the encoder then leaves it to gRPC and takes a new one.
type reqBuf struct {
	b    []byte       // headroom, then the records
	req  []byte       // the request: the end of b, from encoder.finish
	held atomic.Int32 // references gRPC holds (rawCodec.Marshal, then Put)
}

// Put is gRPC giving back a reference to req: reqBuf is the mem.BufferPool
// of the mem.Buffer rawCodec wraps req in.
func (r *reqBuf) Put(*[]byte) { r.held.Add(-1) }

// Get is never called: gRPC only gives a buffer back to its pool.
func (r *reqBuf) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

// rawMessage is a protobuf message in wire form, which rawCodec sends
// (req) and receives (b) as is.
type rawMessage struct {
	req *reqBuf
	b   []byte
}

// rawCodec is the Export call's codec (set per call with ForceCodecV2, not
// registered). It hands the request's buffer to gRPC without a copy, held
// (reqBuf.held) until gRPC frees it: gRPC may write it after Invoke returns
// (a message queued when the call timed out), and the encoder takes
// another buffer meanwhile. Its name is "proto", so the content type is
// the standard application/grpc+proto every receiver decodes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("otlp: cannot marshal %T", v)
	}
	if m.req == nil { // a reply (the benchmark's receiver): b, which is not reused
		return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
	}
	if mem.IsBelowBufferPoolingThreshold(cap(m.req.req)) {
		// gRPC would not give such a buffer back (no Put): a copy it owns.
		return mem.BufferSlice{mem.SliceBuffer(bytes.Clone(m.req.req))}, nil
	}
	m.req.held.Add(1)
	return mem.BufferSlice{mem.NewBuffer(&m.req.req, m.req)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("otlp: cannot unmarshal into %T", v)
	}
	m.b = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// httpSender POSTs the request to /v1/logs (OTLP/HTTP, binary protobuf).
type httpSender struct {
	client  *http.Client
	url     string
	headers http.Header
	gzip    bool
	zbuf    bytes.Buffer // the compressed request (reused)
	zw      *gzip.Writer
	body    *sentBody
}

func newHTTPSender(cfg Config, tc *tls.Config) (*httpSender, error) {
	if _, _, err := net.SplitHostPort(cfg.Endpoint); err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", cfg.Endpoint, err)
	}
	scheme := "http"
	if tc != nil {
		scheme = "https"
	}
	h := http.Header{}
	for k, v := range cfg.Headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/x-protobuf")
	h.Set("User-Agent", "flowlens-agent")
	s := &httpSender{url: scheme + "://" + cfg.Endpoint + "/v1/logs", headers: h, gzip: cfg.Compression == "gzip",
		client: &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, TLSClientConfig: tc, ForceAttemptHTTP2: true,
			MaxIdleConns: 4, IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second,
		}}}
	s.body = &sentBody{closed: make(chan struct{}, 1)}
	if s.gzip {
		h.Set("Content-Encoding", "gzip")
		s.zw, _ = gzip.NewWriterLevel(&s.zbuf, gzipLevel) // klauspost/compress: gzip.go
	}
	return s, nil
}

func (s *httpSender) send(ctx context.Context, rb *reqBuf) (int64, string, error) {
	req := rb.req
	if s.gzip {
		s.zbuf.Reset()
		s.zw.Reset(&s.zbuf)
		s.zw.Write(req) // a bytes.Buffer: cannot fail
		s.zw.Close()
		req = s.zbuf.Bytes()
	}
	select { // a Close left over from an earlier request
	case <-s.body.closed:
	default:
	}
	s.body.r.Reset(req)
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, s.body)
	if err != nil {
		return 0, "", &sendError{err: err}
	}
	r.Header = s.headers
	r.ContentLength = int64(len(req))
	resp, err := s.client.Do(r)
	s.waitBody()
	if err != nil {
		return 0, "", &sendError{retryable: true, err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBodySize))
	if err != nil {
		return 0, "", &sendError{retryable: true, err: err}
	}
	if resp.StatusCode == http.StatusOK {
		return parseResponse(b)
	}
	// The body is a google.rpc.Status: its message is field 2.
	err = fmt.Errorf("HTTP %s: %s", resp.Status, field(b, 2, protowire.BytesType))
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return 0, "", &sendError{retryable: true, after: retryAfter(resp.Header.Get("Retry-After")), err: err}
	}
	return 0, "", &sendError{err: err}
}

// waitBody waits until the transport is done with the request body, which
// it may still be reading after Do returned (a receiver that answers before
// reading it all), since the buffer is reused by the next request. Past a
// timeout (never seen: the receiver already answered) the body is cut off,
// so a stuck write cannot read the next request's bytes.
func (s *httpSender) waitBody() {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-s.body.closed:
	case <-t.C:
		s.body.mu.Lock()
		s.body.dead = true
		s.body.mu.Unlock()
		s.body = &sentBody{closed: make(chan struct{}, 1)}
	}
}

func (s *httpSender) close() error {
	s.client.CloseIdleConnections()
	return nil
}

// retryAfter parses a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// sentBody is the request body; Close tells waitBody the transport is done.
type sentBody struct {
	mu     sync.Mutex
	r      bytes.Reader
	dead   bool // cut off by waitBody
	closed chan struct{}
}

func (b *sentBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dead {
		return 0, io.ErrUnexpectedEOF
	}
	return b.r.Read(p)
}

func (b *sentBody) Close() error {
	select {
	case b.closed <- struct{}{}:
	default:
	}
	return nil
}

// tlsConfig is nil for plaintext, else the TLS configuration: the server
// verified with TLSCA (or the system's roots), the client certificate
// presented if given (pkg/tlsclient).
func tlsConfig(cfg Config) (*tls.Config, error) {
	if !cfg.TLS && cfg.TLSCA == "" && cfg.TLSCert == "" && cfg.TLSKey == "" {
		return nil, nil
	}
	return tlsclient.Config(cfg.TLSCA, cfg.TLSCert, cfg.TLSKey, cfg.TLSServerName)
}

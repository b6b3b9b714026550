package otlp

import (
	"bytes"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"google.golang.org/grpc/encoding"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
)

// gzipLevel is the compression level of --otlp-compression gzip, over
// both protocols. klauspost/compress's level 1 was measured the cheapest
// (BenchmarkGzip, exportertest's 1000-flow request of 817 bytes per flow):
// about 0.65 µs per flow for 19 bytes, against 1.3 µs for 22 bytes with
// the standard library's level 1 (which HTTP used) and 3 µs for 14 bytes
// with its default level (which gRPC's gzip compressor used). Its levels
// 2 to 5 cost 1.4 to 2× more for 15 to 17 bytes; HuffmanOnly and
// ConstantCompression are slower here and no smaller. A flow is mostly
// attribute names that repeat record after record, which the fastest
// level already takes out.
const gzipLevel = gzip.BestSpeed

func init() {
	// gRPC looks compressors up by name in a process-global registry where
	// the last registration wins. grpc/encoding/gzip (imported above, so
	// initialized before this package, whoever else imports it) registered
	// "gzip"; this replaces it for every gRPC client and server of the
	// process: they compress with klauspost/compress and decompress with
	// grpc's own gzip compressor, which is kept for that. Its SetLevel
	// would now panic (it asserts its own type): nothing here calls it.
	encoding.RegisterCompressor(&grpcGzip{std: encoding.GetCompressor(grpcgzip.Name)})
}

// grpcGzip is gRPC's "gzip" compressor (see init). Compress writes the
// whole compressed message to gRPC's writer in one Write at Close: gRPC's
// writer copies each Write into a buffer of its own, and the gzip writer
// writes its header, each deflate block and its trailer separately.
type grpcGzip struct {
	std     encoding.Compressor // grpc/encoding/gzip's, for Decompress
	writers sync.Pool           // of *gzipMessage
}

func (c *grpcGzip) Compress(w io.Writer) (io.WriteCloser, error) {
	m, _ := c.writers.Get().(*gzipMessage)
	if m == nil {
		m = &gzipMessage{pool: &c.writers}
		m.zw, _ = gzip.NewWriterLevel(&m.buf, gzipLevel) // a valid level: no error
	}
	m.out = w
	m.buf.Reset()
	m.zw.Reset(&m.buf)
	return m, nil
}

func (c *grpcGzip) Decompress(r io.Reader) (io.Reader, error) { return c.std.Decompress(r) }

func (c *grpcGzip) Name() string { return grpcgzip.Name }

// gzipMessage compresses one gRPC message into buf, reused from message
// to message (pooled: gRPC may compress for several calls at once).
type gzipMessage struct {
	zw   *gzip.Writer
	buf  bytes.Buffer
	out  io.Writer
	pool *sync.Pool
}

func (m *gzipMessage) Write(p []byte) (int, error) { return m.zw.Write(p) }

func (m *gzipMessage) Close() error {
	out := m.out
	m.out = nil
	defer m.pool.Put(m)
	if err := m.zw.Close(); err != nil {
		return err
	}
	_, err := out.Write(m.buf.Bytes())
	return err
}

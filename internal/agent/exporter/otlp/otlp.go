// Package otlp exports flows as OpenTelemetry log records (OTLP), one
// LogRecord per flow, to any OTLP receiver (the OpenTelemetry Collector,
// observability backends) over gRPC (LogsService/Export) or HTTP (a
// protobuf POST to /v1/logs), with optional TLS, headers and gzip.
//
// Requests are encoded by hand (encode.go) into reused buffers and sent as
// they are (a raw gRPC codec, net/http), so a flow costs no allocation.
//
// It implements exporter.Exporter behind an exporter.Queue. Export returns
// once the receiver has accepted every request of the batch: a retryable
// failure (the OTLP specification's: gRPC UNAVAILABLE and the like, HTTP
// 429/502/503/504, no connection) is retried with backoff, honouring the
// receiver's RetryInfo or Retry-After, until it succeeds, ctx ends or Close;
// the Queue in front drops its oldest batches meanwhile, counted. Records
// the receiver rejects (partial success, or a request refused for good) are
// counted in Stats.RejectedFlows, records given up on in Stats.FailedFlows:
// nothing is lost without a counter.
//
// A flow's attributes are the core fields' (encode.go), then each feature
// group's, from the file named after the feature (dns.go ...), listed in
// groups (zz_generated.groups.go) and called by name in encode.go, both
// generated from the feature registry (groupgen); GroupAttributes
// lists a feature's keys by name.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Defaults of Config.
const (
	DefaultBatchFlows   = 1000
	DefaultTimeout      = 10 * time.Second
	DefaultBackoffBase  = time.Second
	DefaultBackoffMax   = 30 * time.Second
	backoffMultiplier   = 1.6
	backoffJitter       = 0.2
	DefaultMaxReqBytes  = 4<<20 - 64<<10 // under the receivers' default 4 MiB limit, with room for a last record
	maxResponseBodySize = 64 << 10
)

// ErrClosed is returned by Export after Close.
var ErrClosed = errors.New("otlp exporter closed")

// Config configures an Exporter. Zero values take the defaults.
type Config struct {
	// Endpoint is the receiver's host:port.
	Endpoint string
	// Protocol is "grpc" (default) or "http".
	Protocol string
	// TLS: TLS is on when set or when any of the files is given. TLSCA
	// verifies the receiver (empty: the system's roots); TLSCert and
	// TLSKey are the agent's client certificate (mTLS).
	TLS                    bool
	TLSCA, TLSCert, TLSKey string
	// TLSServerName overrides the name the receiver's certificate is
	// verified against (default: the endpoint's host).
	TLSServerName string
	// Headers are sent with every request (gRPC metadata, HTTP headers),
	// e.g. an authorization header.
	Headers map[string]string
	// Compression is "none" (default) or "gzip".
	Compression string
	// BatchFlows is the most log records per request (default 1000).
	BatchFlows int
	// MaxRequestBytes bounds a request's encoded size (default just under
	// 4 MiB, the receivers' default limit); at least one record is sent.
	MaxRequestBytes int

	// NodeName is the resource's host.name and k8s.node.name; Version its
	// service.version and the scope's version.
	NodeName, Version string

	// Timeout bounds one request (default 10 s).
	Timeout time.Duration
	// Backoff between attempts after a failure: BackoffBase, ×1.6 per
	// further failure up to BackoffMax, ±20 % jitter; a delay the receiver
	// asks for (RetryInfo, Retry-After) replaces it, up to BackoffMax.
	BackoffBase, BackoffMax time.Duration
	// RetryTimeout bounds how long Export retries one request; 0 retries
	// until its context ends or Close (the Queue drops older batches).
	RetryTimeout time.Duration

	Logger *slog.Logger
}

// Stats are cumulative counts, safe to read concurrently, in the delivery
// statistics every exporter keeps: Messages are the requests the receiver
// accepted, Bytes their encoded (uncompressed) bytes, Records the log
// records in them, AckedFlows those it accepted, RejectedFlows those it
// rejected (partial success, or a request refused for good: lost),
// FailedFlows those Export gave up on (ctx, RetryTimeout, Close: lost),
// Retries the attempts after a retryable failure.
type Stats = exporter.DeliveryStats

// otlpCounts are the delivery counts an OTLP exporter learns from the
// receiver's answers.
const otlpCounts = exporter.CountMessages | exporter.CountRetries | exporter.CountAcked | exporter.CountRejected | exporter.CountFailed

// The metrics read the exporter through these (exporter.NewCollector).
var (
	_ exporter.Delivering = (*Exporter)(nil)
	_ exporter.Connector  = (*Exporter)(nil)
)

// Delivery is the exporter's delivery statistics (exporter.Delivering).
func (e *Exporter) Delivery() (*exporter.DeliveryStats, exporter.Counts) { return &e.Stats, otlpCounts }

// sender sends one encoded ExportLogsServiceRequest and returns the
// receiver's partial success (records rejected and its message).
type sender interface {
	send(ctx context.Context, req *reqBuf) (rejected int64, msg string, err error)
	close() error
}

// sendError is a failed attempt: whether the OTLP specification lets it be
// retried, and after how long the receiver asked (0: our backoff).
type sendError struct {
	retryable bool
	after     time.Duration
	err       error
}

func (e *sendError) Error() string { return e.err.Error() }
func (e *sendError) Unwrap() error { return e.err }

// Exporter sends batches to an OTLP receiver. Safe for concurrent use;
// Export calls are serialized.
type Exporter struct {
	cfg    Config
	log    *slog.Logger
	sender sender
	Stats  Stats

	life       context.Context // cancelled by Close: aborts a blocked Export
	lifeCancel context.CancelFunc
	connected  atomic.Bool

	mu          sync.Mutex
	closed      bool
	enc         *encoder
	failures    int // consecutive failures, for the backoff
	nextAttempt time.Time
	lastLog     time.Time
	lastReject  time.Time
}

// New prepares an Exporter. It reads the TLS files now, so a bad path fails
// at startup, but does not connect: the first Export does.
func New(cfg Config) (*Exporter, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("otlp exporter: no endpoint")
	}
	setDefaults(&cfg)
	e := &Exporter{cfg: cfg, enc: newEncoder(cfg.NodeName, cfg.Version),
		log: cfg.Logger.With("exporter", "otlp", "endpoint", cfg.Endpoint, "protocol", cfg.Protocol)}
	tc, err := tlsConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	switch cfg.Protocol {
	case "grpc":
		e.sender, err = newGRPCSender(cfg, tc)
	case "http":
		e.sender, err = newHTTPSender(cfg, tc)
	default:
		err = fmt.Errorf("protocol %q: must be grpc or http", cfg.Protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	e.life, e.lifeCancel = context.WithCancel(context.Background())
	return e, nil
}

func setDefaults(c *Config) {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Timeout, DefaultTimeout)
	def(&c.BackoffBase, DefaultBackoffBase)
	def(&c.BackoffMax, DefaultBackoffMax)
	c.BackoffMax = max(c.BackoffMax, c.BackoffBase)
	if c.Protocol == "" {
		c.Protocol = "grpc"
	}
	if c.Compression == "" {
		c.Compression = "none"
	}
	if c.BatchFlows <= 0 {
		c.BatchFlows = DefaultBatchFlows
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxReqBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Name implements exporter.Exporter.
func (e *Exporter) Name() string { return "otlp" }

// Connected reports whether the last request reached the receiver.
func (e *Exporter) Connected() bool { return e.connected.Load() }

// Export sends the batch as requests of at most BatchFlows records and
// returns once the receiver accepted each (or rejected it: counted), or
// with an error when it gives up (ctx, RetryTimeout, Close), the records
// not delivered then counted in Stats.FailedFlows.
func (e *Exporter) Export(ctx context.Context, batch []flow.Record) error {
	if len(batch) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.life.Err() != nil {
		e.Stats.FailedFlows.Add(uint64(len(batch)))
		return ErrClosed
	}
	ctx, release := exporter.Bind(ctx, e.life)
	defer release()

	observed := unixNano(time.Now()) // the records' observed_time_unix_nano
	for i := 0; i < len(batch); {
		e.enc.begin(observed)
		j := i
		for j < len(batch) && j-i < e.cfg.BatchFlows && e.enc.size() < e.cfg.MaxRequestBytes {
			e.enc.appendFlow(&batch[j])
			j++
		}
		if err := e.deliver(ctx, e.enc.finish(), j-i); err != nil {
			e.Stats.FailedFlows.Add(uint64(len(batch) - i))
			if e.life.Err() != nil {
				return ErrClosed
			}
			return fmt.Errorf("otlp receiver unreachable, %d flows lost: %w", len(batch)-i, err)
		}
		i = j
	}
	return nil
}

// deliver sends one request of n records until the receiver answers it,
// retrying what may be retried.
func (e *Exporter) deliver(ctx context.Context, req *reqBuf, n int) error {
	if e.cfg.RetryTimeout > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, e.cfg.RetryTimeout)
		defer c()
	}
	var last error // the last failure, for the error when giving up
	giveUp := func() error {
		if last == nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w; last failure: %w", ctx.Err(), last)
	}
	for {
		if wait := time.Until(e.nextAttempt); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return giveUp()
			}
		}
		rctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
		rejected, msg, err := e.sender.send(rctx, req)
		cancel()
		if err == nil {
			e.accepted(n, len(req.req), rejected, msg)
			return nil
		}
		if ctx.Err() != nil { // our own cancellation, not the receiver's doing
			return giveUp()
		}
		last = err
		var se *sendError
		if errors.As(err, &se) && !se.retryable {
			e.connected.Store(true) // it answered
			e.reject(n, err)
			return nil
		}
		e.Stats.Retries.Add(1)
		e.failed(err)
	}
}

// accepted records a request the receiver answered with success, possibly
// partial.
func (e *Exporter) accepted(n, size int, rejected int64, msg string) {
	rejected = min(max(rejected, 0), int64(n))
	e.Stats.Messages.Add(1)
	e.Stats.Records.Add(uint64(n))
	e.Stats.AckedFlows.Add(uint64(n) - uint64(rejected))
	e.Stats.Bytes.Add(uint64(size))
	if e.failures > 0 || !e.connected.Load() {
		e.log.Info("sending flows to the OTLP receiver", "after_failures", e.failures)
	}
	e.failures, e.nextAttempt = 0, time.Time{}
	e.connected.Store(true)
	if rejected > 0 {
		e.reject(int(rejected), fmt.Errorf("partial success: %s", msg))
	} else if msg != "" && time.Since(e.lastReject) > 30*time.Second {
		e.lastReject = time.Now()
		e.log.Warn("the OTLP receiver accepted the flows with a warning", "message", msg)
	}
}

// reject counts records the receiver refused, with an error log at most
// every 30 s.
func (e *Exporter) reject(n int, err error) {
	e.Stats.RejectedFlows.Add(uint64(n))
	if time.Since(e.lastReject) > 30*time.Second {
		e.lastReject = time.Now()
		e.log.Error("the OTLP receiver rejected flows (lost); check its limits and configuration",
			"rejected_flows_total", e.Stats.RejectedFlows.Load(), "error", err)
	}
}

// failed records a retryable failure: next attempt after the backoff or
// the delay the receiver asked for, a log line at most every 30 s.
func (e *Exporter) failed(err error) {
	e.connected.Store(false)
	e.failures++
	d := backoffDelay(e.cfg, e.failures)
	var se *sendError
	if errors.As(err, &se) && se.after > 0 {
		d = min(se.after, e.cfg.BackoffMax)
	}
	e.nextAttempt = time.Now().Add(d)
	if e.failures == 1 || time.Since(e.lastLog) > 30*time.Second {
		e.lastLog = time.Now()
		e.log.Warn("OTLP receiver unavailable: retrying with backoff", "failures", e.failures, "retry_in", d.Round(time.Millisecond), "error", err)
	}
}

// backoffDelay is base·1.6^(n-1), capped at max, ±20 %.
func backoffDelay(c Config, n int) time.Duration {
	d := float64(c.BackoffBase)
	for i := 1; i < n && d < float64(c.BackoffMax); i++ {
		d *= backoffMultiplier
	}
	d = min(d, float64(c.BackoffMax))
	d *= 1 + backoffJitter*(rand.Float64()*2-1)
	return time.Duration(d)
}

// Close aborts an Export still retrying and closes the connections.
func (e *Exporter) Close() error {
	e.lifeCancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	e.connected.Store(false)
	return e.sender.close()
}

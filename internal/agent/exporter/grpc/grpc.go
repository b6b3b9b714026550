// Package grpc exports flows to a collector over gRPC (flowlens.flow.v1
// FlowCollector.Export, one client stream per agent), with optional TLS or
// mTLS, keepalive, and reconnection with exponential backoff and jitter.
//
// It implements exporter.Exporter and runs behind an exporter.Queue: Export
// blocks while the collector is unreachable or slow (retrying the batch on
// a new stream after a backoff), the Queue in front of it meanwhile drops
// the oldest batches and counts them. A collector that misbehaves can make
// Export return errors, never panic or stall the agent beyond that queue.
//
// Delivery is at-most-once: see api/flow/v1/flow.proto for why the API is a
// client stream without per-batch acknowledgements.
package grpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/pkg/tlsclient"

	grpcgo "google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// Defaults of Config.
const (
	DefaultKeepaliveTime     = 30 * time.Second
	DefaultKeepaliveTimeout  = 10 * time.Second
	DefaultBackoffBase       = time.Second
	DefaultBackoffMax        = 30 * time.Second
	DefaultBackoffMultiplier = 1.6
	DefaultBackoffJitter     = 0.2
	DefaultConnectTimeout    = 10 * time.Second
	// DefaultMaxMessageBytes keeps every message under gRPC's default
	// receive limit (4 MiB), so any FlowCollector server accepts it.
	DefaultMaxMessageBytes = 4 << 20
)

// ErrClosed is returned by Export after Close.
var ErrClosed = errors.New("grpc exporter closed")

// Config configures an Exporter. Zero durations and numbers take the defaults.
type Config struct {
	// Target is the collector's address: host:port, or any gRPC target
	// ("dns:///collector.ns.svc:9990").
	Target string

	// TLS: with TLS false and none of the files set the connection is
	// plaintext. TLSCA
	// verifies the collector (empty: the system's roots); TLSCert and
	// TLSKey are the agent's client certificate (mTLS). The key pair is
	// re-read at each handshake, so rotated files are picked up on the next
	// reconnection.
	TLS                    bool
	TLSCA, TLSCert, TLSKey string
	// TokenFile holds a bearer token sent with every stream
	// ("authorization: Bearer <token>", read again at each stream: the
	// kubelet rotates projected tokens); "": none. Without TLS it is sent
	// only when InsecurePlaintext says so.
	TokenFile         string
	InsecurePlaintext bool
	// TLSServerName overrides the name the collector's certificate is
	// verified against (default: the target's host).
	TLSServerName string

	// NodeName and AgentIP are stamped on every flow. A zero AgentIP is
	// learned from the local address of the connection to the collector.
	NodeName string
	AgentIP  netip.Addr

	// Keepalive: a ping after KeepaliveTime without activity; no answer
	// within KeepaliveTimeout closes the connection (then reconnects).
	// The collector must tolerate pings this often (pkg/receiver does).
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration

	// Backoff between attempts after a failure: BackoffBase after the first,
	// multiplied by BackoffMultiplier per further failure up to BackoffMax,
	// each randomised by ±BackoffJitter (a fraction). The same parameters
	// drive gRPC's own reconnection of the underlying connection.
	BackoffBase       time.Duration
	BackoffMax        time.Duration
	BackoffMultiplier float64
	BackoffJitter     float64
	// ConnectTimeout bounds one connection attempt.
	ConnectTimeout time.Duration

	// MaxMessageBytes: a batch whose encoding is larger is sent as several
	// messages, each at most this size (a single flow is always sent).
	MaxMessageBytes int
	// RetryTimeout bounds how long Export retries one batch; 0 retries until
	// its context ends or Close (the Queue drops older batches meanwhile).
	RetryTimeout time.Duration

	Logger *slog.Logger
}

// Stats are cumulative counts, safe to read concurrently: the delivery
// statistics every exporter keeps (Messages, Bytes, Records: the FlowBatch
// messages sent, their protobuf bytes and flows; SendErrors: streams that
// failed and were reopened; Retries: attempts after a failure; Refused:
// streams the collector ended with a status retrying cannot fix, such as
// InvalidArgument, ResourceExhausted or PermissionDenied, so a message
// already sent is lost while the Queue counted it as exported: delivery
// is at-most-once), and the streams opened.
type Stats struct {
	exporter.DeliveryStats
	StreamsOpened atomic.Uint64 // streams opened (1 + reconnections)
}

// gRPCCounts are the delivery counts a gRPC exporter learns: the
// collector does not acknowledge flows.
const gRPCCounts = exporter.CountMessages | exporter.CountSendErrors | exporter.CountRetries | exporter.CountRefused

// The metrics read the exporter through these (exporter.NewCollector).
var (
	_ exporter.Delivering = (*Exporter)(nil)
	_ exporter.Connector  = (*Exporter)(nil)
)

// Delivery is the exporter's delivery statistics (exporter.Delivering).
func (e *Exporter) Delivery() (*exporter.DeliveryStats, exporter.Counts) {
	return &e.Stats.DeliveryStats, gRPCCounts
}

// Exporter sends batches to a collector. Safe for concurrent use; Export
// calls are serialized.
type Exporter struct {
	cfg   Config
	log   *slog.Logger
	conn  *grpcgo.ClientConn
	codec passthroughCodec
	Stats Stats

	life       context.Context // cancelled by Close: aborts a blocked Export
	lifeCancel context.CancelFunc
	localIP    atomic.Pointer[netip.Addr] // learned from the connection
	connected  atomic.Bool

	mu             sync.Mutex
	closed         bool
	identityIP     netip.Addr       // the AgentIP stamped on flows
	enc            *flowpb.Appender // stamps identityIP (wire form) and the node name
	buf            []byte           // the encoded batch (reused)
	cuts           []int            // message boundaries in flows (reused)
	offs           []int            // message boundaries in buf (reused)
	msg            encodedBatch     // the message being sent (a part of buf)
	stream         grpcgo.ClientStreamingClient[encodedBatch, flowv1.ExportSummary]
	streamCancel   context.CancelFunc
	failures       int // consecutive failures, for the backoff
	nextAttempt    time.Time
	lastLog        time.Time
	lastRefusalLog time.Time
}

// New prepares an Exporter. It checks the TLS files now, so a bad path
// fails at startup, but does not connect: the first Export does, and a
// collector that is down then is retried with backoff.
func New(cfg Config) (*Exporter, error) {
	if cfg.Target == "" {
		return nil, errors.New("grpc exporter: no target")
	}
	setDefaults(&cfg)
	e := &Exporter{cfg: cfg, log: cfg.Logger.With("exporter", "grpc", "target", cfg.Target),
		codec: newPassthroughCodec(), identityIP: cfg.AgentIP, enc: flowpb.NewAppender(cfg.NodeName, flowpb.AddrBytes(cfg.AgentIP))}
	creds, err := transportCredentials(cfg)
	if err != nil {
		return nil, err
	}
	bo := backoff.Config{BaseDelay: cfg.BackoffBase, Multiplier: cfg.BackoffMultiplier, Jitter: cfg.BackoffJitter, MaxDelay: cfg.BackoffMax}
	opts := []grpcgo.DialOption{grpcgo.WithTransportCredentials(creds)}
	if cfg.TokenFile != "" {
		if creds.Info().SecurityProtocol != "tls" && !cfg.InsecurePlaintext {
			return nil, errors.New("grpc exporter: a token file needs TLS (the token would cross the network in plaintext), or InsecurePlaintext")
		}
		tf, err := newTokenFile(cfg.TokenFile, cfg.InsecurePlaintext)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpcgo.WithPerRPCCredentials(tf))
	}
	conn, err := grpcgo.NewClient(cfg.Target, append(opts,
		grpcgo.WithKeepaliveParams(keepalive.ClientParameters{Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout, PermitWithoutStream: true}),
		grpcgo.WithConnectParams(grpcgo.ConnectParams{Backoff: bo, MinConnectTimeout: cfg.ConnectTimeout}),
		grpcgo.WithContextDialer(e.dial),
		grpcgo.WithUserAgent("flowlens-agent"))...,
	)
	if err != nil {
		return nil, fmt.Errorf("grpc exporter: %w", err)
	}
	e.conn = conn
	e.life, e.lifeCancel = context.WithCancel(context.Background())
	return e, nil
}

func setDefaults(c *Config) {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.KeepaliveTime, DefaultKeepaliveTime)
	def(&c.KeepaliveTimeout, DefaultKeepaliveTimeout)
	def(&c.BackoffBase, DefaultBackoffBase)
	def(&c.BackoffMax, DefaultBackoffMax)
	def(&c.ConnectTimeout, DefaultConnectTimeout)
	if c.BackoffMax < c.BackoffBase {
		c.BackoffMax = c.BackoffBase
	}
	if c.BackoffMultiplier < 1 {
		c.BackoffMultiplier = DefaultBackoffMultiplier
	}
	if c.BackoffJitter <= 0 || c.BackoffJitter >= 1 {
		c.BackoffJitter = DefaultBackoffJitter
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// dial connects and remembers the local address: the agent's IP as the
// collector sees it (unless NAT is in the way), used when AgentIP is unset.
func (e *Exporter) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if ta, ok := c.LocalAddr().(*net.TCPAddr); ok {
		ip := ta.AddrPort().Addr().Unmap()
		e.localIP.Store(&ip)
	}
	return c, nil
}

// Name implements exporter.Exporter.
func (e *Exporter) Name() string { return "grpc" }

// Connected reports whether a stream to the collector is open and the last
// message sent on it went out.
func (e *Exporter) Connected() bool { return e.connected.Load() }

// Export sends the batch, as one message or several under MaxMessageBytes.
// When the stream breaks it reopens one, after a backoff, and resends the
// message that did not go out, until it succeeds, ctx ends, RetryTimeout
// passes or Close is called.
//
// Sends are asynchronous (a message is written, not acknowledged), so when
// the collector refuses a message (InvalidArgument, ResourceExhausted...)
// the refusal ends the stream and is seen by a later send: the refused
// message is lost (Stats.Refused, an error log), the message whose send saw
// the refusal never left, and is resent on a new stream like after any
// failure. Only an error about the message itself (one gRPC refuses to
// send) makes Export return it at once.
func (e *Exporter) Export(ctx context.Context, batch []flow.Record) error {
	if len(batch) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.life.Err() != nil {
		return ErrClosed
	}
	ctx, release := exporter.Bind(ctx, e.life)
	defer release()
	if e.cfg.RetryTimeout > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, e.cfg.RetryTimeout)
		defer c()
	}

	// Connect first: the agent IP may be learned from the connection.
	if err := e.ensureStream(ctx); err != nil {
		return e.abortErr(ctx, err)
	}
	e.updateIdentity()
	cuts, offs := e.encode(batch)
	defer func() { e.msg.wire = nil }()
	for i := 0; i+1 < len(cuts); {
		if err := e.ensureStream(ctx); err != nil {
			return e.abortErr(ctx, err)
		}
		e.msg.wire = e.buf[offs[i]:offs[i+1]]
		err := e.send(ctx)
		if err != nil {
			if ctx.Err() != nil { // our own cancellation, not the collector's doing
				e.dropStream()
				return e.abortErr(ctx, err)
			}
			serverEnded := errors.Is(err, io.EOF)
			st := e.streamFailed(err)
			if !retryable(st) {
				if !serverEnded { // gRPC would not send this message: resending cannot help
					return fmt.Errorf("cannot send the batch: %w", st)
				}
				e.refused(st)
			}
			e.Stats.Retries.Add(1)
			continue // resend the same message on a new stream
		}
		e.Stats.Messages.Add(1)
		e.Stats.Records.Add(uint64(cuts[i+1] - cuts[i]))
		e.Stats.Bytes.Add(uint64(offs[i+1] - offs[i]))
		i++
	}
	return nil
}

// abortErr is what Export returns when it gives up: ErrClosed after Close,
// else err with the reason.
func (e *Exporter) abortErr(ctx context.Context, err error) error {
	if e.life.Err() != nil {
		return ErrClosed
	}
	return fmt.Errorf("collector unreachable (%w): %w", context.Cause(ctx), err)
}

// updateIdentity stamps the learned local IP once it is known.
func (e *Exporter) updateIdentity() {
	if e.cfg.AgentIP.IsValid() {
		return
	}
	if p := e.localIP.Load(); p != nil && *p != e.identityIP {
		e.identityIP = *p
		e.enc.SetIdentity(e.cfg.NodeName, flowpb.AddrBytes(*p))
	}
}

// encode writes batch into e.buf as FlowBatch wire bytes and returns the
// boundaries of the messages it goes out in, so each stays under
// MaxMessageBytes (a flow alone may not): message i is flows
// cuts[i]..cuts[i+1], bytes e.buf[offs[i]:offs[i+1]]; cuts is [0, n] when
// the whole batch fits. A FlowBatch is only its flows' elements, so any run
// of them is a message.
func (e *Exporter) encode(batch []flow.Record) (cuts, offs []int) {
	buf := e.buf[:0]
	cuts, offs = append(e.cuts[:0], 0), append(e.offs[:0], 0)
	for i := range batch {
		start := len(buf)
		buf = e.enc.Append(buf, &batch[i])
		if start > offs[len(offs)-1] && len(buf)-offs[len(offs)-1] > e.cfg.MaxMessageBytes {
			cuts, offs = append(cuts, i), append(offs, start)
		}
	}
	cuts, offs = append(cuts, len(batch)), append(offs, len(buf))
	e.buf, e.cuts, e.offs = buf, cuts, offs
	return cuts, offs
}

// ensureStream opens a stream unless one is open, waiting for the backoff
// after a failure.
func (e *Exporter) ensureStream(ctx context.Context) error {
	for e.stream == nil {
		if wait := time.Until(e.nextAttempt); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		// The stream outlives this call (it serves later batches): its
		// context is its own, cancelled with ctx only while opening.
		sctx, cancel := context.WithCancel(context.Background())
		stop := context.AfterFunc(ctx, cancel)
		// Not WaitForReady: while the connection is down this fails at once
		// (Unavailable) and the backoff here paces the attempts.
		st, err := e.openStream(sctx)
		stop()
		if err == nil && sctx.Err() != nil {
			err = sctx.Err()
		}
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return err
			}
			e.failed(err)
			continue
		}
		e.stream, e.streamCancel = st, cancel
		e.Stats.StreamsOpened.Add(1)
		// The stream is only known to work once a message went through:
		// failures and the connected state are reset in send.
	}
	return nil
}

// openStream opens an Export stream that sends encodedBatch messages
// (the generated client's stream only takes *flowv1.FlowBatch).
func (e *Exporter) openStream(ctx context.Context) (grpcgo.ClientStreamingClient[encodedBatch, flowv1.ExportSummary], error) {
	s, err := e.conn.NewStream(ctx, &flowv1.FlowCollector_ServiceDesc.Streams[0], flowv1.FlowCollector_Export_FullMethodName,
		grpcgo.StaticMethod(), grpcgo.ForceCodecV2(e.codec))
	if err != nil {
		return nil, err
	}
	return &grpcgo.GenericClientStream[encodedBatch, flowv1.ExportSummary]{ClientStream: s}, nil
}

// send writes e.msg on the stream; ctx cancels a Send blocked by flow
// control (a slow collector).
func (e *Exporter) send(ctx context.Context) error {
	stop := context.AfterFunc(ctx, e.streamCancel)
	defer stop()
	if err := e.stream.Send(&e.msg); err != nil {
		return err
	}
	if e.failures > 0 || !e.connected.Load() {
		e.log.Info("sending flows to the collector", "after_failures", e.failures)
		e.failures = 0
		e.nextAttempt = time.Time{}
	}
	e.connected.Store(true)
	return nil
}

// streamFailed ends the broken stream and returns the status that ended it.
func (e *Exporter) streamFailed(sendErr error) error {
	err := sendErr
	if errors.Is(sendErr, io.EOF) {
		// The server ended the stream: its status comes with the reply,
		// already received; the timer only guards against a stuck peer.
		t := time.AfterFunc(5*time.Second, e.streamCancel)
		_, err = e.stream.CloseAndRecv()
		t.Stop()
		if err == nil {
			err = status.Error(codes.Unavailable, "collector ended the stream")
		}
	}
	e.dropStream()
	e.Stats.SendErrors.Add(1)
	e.failed(err)
	return err
}

func (e *Exporter) dropStream() {
	e.streamCancel()
	e.stream, e.streamCancel = nil, nil
	e.connected.Store(false)
}

// failed records a failure: disconnected, next attempt after a backoff,
// and a log line at most every 30 s.
func (e *Exporter) failed(err error) {
	e.connected.Store(false)
	e.failures++
	d := backoffDelay(e.cfg, e.failures)
	e.nextAttempt = time.Now().Add(d)
	if e.failures == 1 || time.Since(e.lastLog) > 30*time.Second {
		e.lastLog = time.Now()
		e.log.Warn("collector unavailable: retrying with backoff", "failures", e.failures, "retry_in", d.Round(time.Millisecond), "error", err)
	}
}

// backoffDelay is base·multiplier^(n-1), capped at max, ±jitter.
func backoffDelay(c Config, n int) time.Duration {
	d := float64(c.BackoffBase)
	for i := 1; i < n && d < float64(c.BackoffMax); i++ {
		d *= c.BackoffMultiplier
	}
	d = min(d, float64(c.BackoffMax))
	d *= 1 + c.BackoffJitter*(rand.Float64()*2-1)
	return time.Duration(d)
}

// refused records a refusal by the collector, with an error log at most
// every 30 s.
func (e *Exporter) refused(err error) {
	e.Stats.Refused.Add(1)
	if time.Since(e.lastRefusalLog) > 30*time.Second {
		e.lastRefusalLog = time.Now()
		e.log.Error("the collector refused flows (lost); check the agent's and collector's limits and versions",
			"refused_total", e.Stats.Refused.Load(), "error", err)
	}
}

// retryable reports whether resending on a new stream may succeed.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// Close ends the stream (waiting up to 5 s for the collector's summary),
// aborts an Export still retrying, and closes the connection.
func (e *Exporter) Close() error {
	e.lifeCancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	if e.stream != nil {
		t := time.AfterFunc(5*time.Second, e.streamCancel)
		sum, err := e.stream.CloseAndRecv()
		t.Stop()
		e.streamCancel()
		e.stream = nil
		if err != nil {
			if !retryable(err) {
				e.refused(err)
			} else {
				e.log.Warn("closing the stream", "error", err)
			}
		} else {
			e.log.Info("stream closed", "collector_batches", sum.GetBatches(), "collector_flows", sum.GetFlows())
		}
	}
	e.connected.Store(false)
	return e.conn.Close()
}

// transportCredentials builds plaintext, TLS or mTLS credentials.
func transportCredentials(cfg Config) (credentials.TransportCredentials, error) {
	if !cfg.TLS && cfg.TLSCA == "" && cfg.TLSCert == "" && cfg.TLSKey == "" {
		return insecure.NewCredentials(), nil
	}
	creds, err := tlsclient.Credentials(cfg.TLSCA, cfg.TLSCert, cfg.TLSKey, cfg.TLSServerName)
	if err != nil {
		return nil, fmt.Errorf("grpc exporter: %w", err)
	}
	return creds, nil
}

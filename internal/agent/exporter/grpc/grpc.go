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
// Delivery is acknowledged (acked.go): the exporter streams on
// FlowCollector.ExportAcked, keeps every message until the collector
// acknowledges it (at most MaxUnackedBatches batches), and sends what is
// not acknowledged again, in order, on the next stream; the collector drops
// what it already applied by (agent instance, seq). Against a collector
// without ExportAcked it falls back to Export, at-most-once.
package grpc

import (
	"context"
	"errors"
	"fmt"
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
	// DefaultMaxMessageBytes keeps every message under the collector's
	// default limit, which is gRPC's default receive limit (4 MiB), so any
	// FlowCollector server accepts it.
	DefaultMaxMessageBytes = flowpb.MaxMessageBytes
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
	// messages, each at most this size (a single flow is always sent). A
	// message also carries at most flowpb.MaxFlowsPerMessage flows, the
	// collector's default limit.
	MaxMessageBytes int
	// RetryTimeout bounds how long Export retries one batch; 0 retries until
	// its context ends or Close (the Queue drops older batches meanwhile).
	RetryTimeout time.Duration
	// MaxUnackedBatches bounds the batches sent and not yet acknowledged
	// by the collector, which the exporter keeps to send again after a
	// broken stream (the agent passes --export-buffer, the bound of its
	// queue: at most that many batches wait in front of the exporter and
	// that many inside it). Export waits for acknowledgements while it is
	// reached, so the Queue drops its oldest batches, counted. 0: 1.
	MaxUnackedBatches int

	Logger *slog.Logger
}

// Stats are cumulative counts, safe to read concurrently: the delivery
// statistics every exporter keeps (Messages, Bytes, Records: the FlowBatch
// messages sent, their protobuf bytes and flows, each message once however
// often it is resent; SendErrors: streams that failed and were reopened;
// Retries: attempts after a failure; Refused: messages the collector
// refused with a status retrying cannot fix, such as InvalidArgument,
// ResourceExhausted or PermissionDenied; AckedFlows: flows the collector
// acknowledged; RejectedFlows: the flows of the refused messages, lost;
// FailedFlows: flows taken and never acknowledged, lost: still
// unacknowledged when the exporter closed, or a batch given up on), and
// the streams opened. Over ExportAcked, every flow handed to Export ends
// in exactly one of AckedFlows, RejectedFlows and FailedFlows, or is
// still pending (Pending).
type Stats struct {
	exporter.DeliveryStats
	StreamsOpened atomic.Uint64 // streams opened (1 + reconnections)
	// Unacknowledged counts the messages sent on a legacy Export stream,
	// delivered at most once (a collector without ExportAcked).
	Unacknowledged atomic.Uint64
}

// gRPCCounts are the delivery counts a gRPC exporter learns.
const gRPCCounts = exporter.CountMessages | exporter.CountSendErrors | exporter.CountRetries | exporter.CountRefused |
	exporter.CountAcked | exporter.CountRejected | exporter.CountFailed

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

	// instance is this process's identity on ExportAcked: the node name
	// and an id drawn at New.
	instance string
	acked    atomic.Uint64 // the highest seq the collector acknowledged
	// pendingFlows are the flows of pending (read without mu: Pending).
	pendingFlows atomic.Int64
	ackWake      chan struct{} // an acknowledgement came, or a stream's reader ended

	mu             sync.Mutex
	closed         bool
	identityIP     netip.Addr       // the AgentIP stamped on flows
	enc            *flowpb.Appender // stamps identityIP (wire form) and the node name
	buf            []byte           // the encoded batch (reused)
	cuts           []int            // message boundaries in flows (reused)
	offs           []int            // message boundaries in buf (reused)
	msg            encodedBatch     // the message being sent (a pending one's wire)
	stream         *stream          // nil: none open
	legacy         bool             // the collector has no ExportAcked: open Export streams
	legacyLogged   bool
	seq            uint64       // the last seq given to a message
	pending        []pendingMsg // sent or to send, not acknowledged, in seq order
	pendingBatches int          // batches in pending
	sent           int          // pending[:sent] went out on the current stream
	lender         *lender      // wire buffers of messages done with, reused (codec.go)
	failures       int          // consecutive failures, for the backoff
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
	l := newLender(cfg.MaxUnackedBatches)
	e := &Exporter{cfg: cfg, log: cfg.Logger.With("exporter", "grpc", "target", cfg.Target),
		lender: l, codec: newPassthroughCodec(l), identityIP: cfg.AgentIP, enc: flowpb.NewAppender(cfg.NodeName, flowpb.AddrBytes(cfg.AgentIP)),
		instance: newInstance(cfg.NodeName), ackWake: make(chan struct{}, 1)}
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
		// What the agent receives is ExportAcks, a few bytes each: a
		// fixed receive window, which turns off gRPC's bandwidth-delay
		// estimation, whose ping per received data frame would cost a
		// round of frames per acknowledgement. (The collector's window
		// for the flows the agent sends is the collector's.)
		grpcgo.WithInitialWindowSize(1<<16), grpcgo.WithInitialConnWindowSize(1<<16),
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
	if c.MaxUnackedBatches <= 0 {
		c.MaxUnackedBatches = 1
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

// Conn is the exporter's connection to the collector: the agent's packet
// capture stream (package capturectl) rides on it, with the same target,
// TLS, token and keepalives.
func (e *Exporter) Conn() grpcgo.ClientConnInterface { return e.conn }

// Name implements exporter.Exporter.
func (e *Exporter) Name() string { return "grpc" }

// Connected reports whether a stream to the collector is open and the last
// message sent on it went out.
func (e *Exporter) Connected() bool { return e.connected.Load() }

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

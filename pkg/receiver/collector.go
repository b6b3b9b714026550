// Package receiver is the receiving end of flowlens' gRPC flow export: a
// gRPC server implementing flowlens.flow.v1.FlowCollector that hands every
// batch an agent sends to a Handler. cmd/flowlens-collector is built on it;
// other programs import it to receive flows:
//
//	srv, err := collector.New(func(ctx context.Context, b *collector.Batch) error {
//		for _, f := range b.Flows { ... } // validated *flowv1.Flow
//		return nil
//	}, collector.Options{})
//	lis, _ := net.Listen("tcp", ":9990")
//	go srv.Serve(lis)
//	defer srv.Shutdown(ctx)
//
// Every message is checked before it is decoded, so that what a sender
// makes the server allocate is bounded (flowpb.DecodeBatch): a message
// larger than Options.MaxMessageBytes ends its stream with
// ResourceExhausted (gRPC's own size check, before reading it); the flows
// are counted from the wire before any is decoded, and a message of more
// than Options.MaxFlowsPerBatch ends its stream with ResourceExhausted
// ("2000000 flows in one message, max 100000"); one that does not decode
// or holds an invalid flow (flowpb.Validate) ends its stream with
// InvalidArgument. Only that stream ends: the server keeps serving every
// other agent, and the agent that sent it reconnects. A flow whose string
// or list is longer than its bound (flowpb.Bounds: a name longer than
// Kubernetes or the kernel allows, more interfaces than the datapath
// records) is refused alone before it is decoded, counted
// (Stats.RefusedBounds) and logged; the message's other flows go on.
//
// One client (the CN of its certificate, else its IP address) holds at
// most Options.MaxStreamsPerClient streams, all clients together
// Options.MaxStreams: a client cannot take the others' slots.
//
// Agents stream on ExportAcked (acked.go): each message is acknowledged
// once the Handler returned nil for it, and a message whose (agent
// instance, seq) was applied already is acknowledged as a duplicate
// without reaching the Handler again (acktable.go: in memory, or in
// Options.AckStateFile across restarts). Export, without
// acknowledgements, serves agents built before it.
package receiver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// Defaults of Options.
const (
	DefaultMaxMessageBytes  = flowpb.MaxMessageBytes    // what the agents send
	DefaultMaxFlowsPerBatch = flowpb.MaxFlowsPerMessage // the agents' split
	DefaultMaxStreams       = 4096
	// DefaultMaxStreamsPerClient leaves an agent room for the streams of
	// its reconnections that the server has not yet seen die (keepalive
	// finds a dead one within ~1.5 min).
	DefaultMaxStreamsPerClient = 16
	// DefaultMaxStreamsPerConnection is HTTP/2's MaxConcurrentStreams: an
	// agent uses one stream, `flowlens observe` one per query.
	DefaultMaxStreamsPerConnection = 100
	// DefaultKeepaliveMinTime is the shortest keepalive ping interval the
	// server tolerates from an agent (the agent pings every 30 s by default).
	DefaultKeepaliveMinTime = 10 * time.Second
)

// Peer identifies the agent a batch came from.
type Peer struct {
	Addr net.Addr
	// CommonName is the subject CN of the agent's verified client
	// certificate (mTLS); "" without one.
	CommonName string
}

// Batch is one message received from an agent. Its flows have passed
// flowpb.Validate.
type Batch struct {
	Peer  Peer
	Flows []*flowv1.Flow
}

// Handler receives each batch. It is called from one goroutine per agent
// stream, so concurrently for different agents, and never concurrently for
// one stream (on ExportAcked, for one agent instance). It may keep the
// batch; on ExportAcked the batch is acknowledged once it returns nil. A
// non-nil error ends the agent's stream with the error's gRPC status if it
// has one, Unavailable otherwise (the agent then reconnects after a backoff
// and sends the unacknowledged batch again); Refuse(err) refuses the batch
// for good (not sent again).
type Handler func(ctx context.Context, b *Batch) error

// Options configure a Server. Zero values take the defaults.
type Options struct {
	// MaxMessageBytes bounds one received message (gRPC's MaxRecvMsgSize).
	MaxMessageBytes int
	// MaxFlowsPerBatch bounds the flows in one message.
	MaxFlowsPerBatch int
	// MaxStreams bounds the agent streams served at once; more are refused
	// with ResourceExhausted. Negative: unlimited.
	MaxStreams int
	// MaxStreamsPerClient bounds the streams of one client (ClientKey);
	// more are refused with ResourceExhausted. Negative: unlimited.
	MaxStreamsPerClient int
	// MaxStreamsPerConnection bounds the streams (calls) open at once on
	// one client connection (HTTP/2 MaxConcurrentStreams): a client waits
	// for one to end before it opens more.
	MaxStreamsPerConnection int
	// TLS, when set, serves TLS (see ServerTLS; ClientAuth set to
	// RequireAndVerifyClientCert makes it mTLS). Nil serves plaintext.
	TLS *tls.Config
	// Authorize, when set, is asked at the start of every call the server
	// serves (Export streams, and the methods of services added with
	// RegisterService) with the call's full method name, e.g.
	// "/flowlens.flow.v1.FlowCollector/Export"; an error (a gRPC status:
	// Unauthenticated, PermissionDenied) refuses the call, and the context
	// it returns is the call's, so it can carry the caller's identity to
	// the Handler. Nil: every call is served.
	Authorize func(ctx context.Context, fullMethod string) (context.Context, error)
	// KeepaliveMinTime is the shortest keepalive interval tolerated from
	// clients (faster pingers are disconnected).
	KeepaliveMinTime time.Duration
	// AckStateFile, when set, is where ExportAcked writes the last message
	// applied for each agent instance (one short line per message,
	// compacted now and then), and reads it back at New: a collector
	// restarted after a crash or a SIGKILL still drops the messages it
	// applied before. "": kept in memory only (a restart forgets it, and a
	// message applied but not yet acknowledged when the collector died is
	// applied again when the agent resends it).
	AckStateFile string
	// MaxAgentInstances bounds the agent instances remembered for
	// ExportAcked (the one idle longest is forgotten first).
	MaxAgentInstances int
	// CheckInstance, when set, is asked about every ExportAcked message's
	// agent_instance before its duplicate check, with the context
	// Authorize returned: an error (a gRPC status) refuses the message, so
	// that a caller cannot have another agent's messages dropped as
	// duplicates by claiming its instance. Nil: every instance is taken.
	CheckInstance func(ctx context.Context, instance string) error
	Logger        *slog.Logger
}

// Stats are cumulative counts, safe to read concurrently.
type Stats struct {
	Streams       atomic.Int64  // streams open now
	StreamsTotal  atomic.Uint64 // streams accepted since start
	Batches       atomic.Uint64 // batches handed to the Handler
	Flows         atomic.Uint64 // flows in those batches
	Bytes         atomic.Uint64 // wire bytes of those batches
	Rejected      atomic.Uint64 // messages refused (malformed, invalid, oversized, too many flows)
	Malformed     atomic.Uint64 // of those, messages that did not decode or held an invalid flow
	HandlerErrors atomic.Uint64 // batches the Handler returned an error for
	// RefusedBounds counts flows refused alone for a string or list beyond
	// its bound; RefusedTooMany the flows of messages refused for holding
	// more than MaxFlowsPerBatch.
	RefusedBounds  atomic.Uint64
	RefusedTooMany atomic.Uint64
	// StreamsRefused counts streams refused because MaxStreams were open;
	// StreamsRefusedClient because their client had MaxStreamsPerClient.
	StreamsRefused       atomic.Uint64
	StreamsRefusedClient atomic.Uint64
	// Duplicates counts the ExportAcked messages received again after
	// they were applied (an agent resending what it had no acknowledgement
	// for), acknowledged and not applied again; DuplicateFlows their flows.
	Duplicates, DuplicateFlows atomic.Uint64
	// AckStateErrors counts failed writes of Options.AckStateFile.
	AckStateErrors atomic.Uint64
}

// Server is a FlowCollector gRPC server.
type Server struct {
	flowv1.UnimplementedFlowCollectorServer

	h     Handler
	opts  Options
	log   *slog.Logger
	grpc  *grpc.Server
	Stats Stats

	slots    chan struct{} // MaxStreams tokens; nil = unlimited
	mu       sync.Mutex
	clients  map[string]int // open streams by ClientKey
	lastWarn atomic.Int64   // unix nanoseconds of the last refused-flows log
	draining chan struct{}
	drainOne sync.Once
	loops    sync.WaitGroup // stream receive loops
	acks     *ackTable      // ExportAcked's last applied message per agent instance
}

// New returns a Server; Serve starts it on a listener.
func New(h Handler, opts Options) (*Server, error) {
	if h == nil {
		return nil, errors.New("collector: nil handler")
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.MaxFlowsPerBatch <= 0 {
		opts.MaxFlowsPerBatch = DefaultMaxFlowsPerBatch
	}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.MaxStreamsPerClient == 0 {
		opts.MaxStreamsPerClient = DefaultMaxStreamsPerClient
	}
	if opts.MaxStreamsPerConnection <= 0 {
		opts.MaxStreamsPerConnection = DefaultMaxStreamsPerConnection
	}
	if opts.KeepaliveMinTime <= 0 {
		opts.KeepaliveMinTime = DefaultKeepaliveMinTime
	}
	if opts.MaxAgentInstances <= 0 {
		opts.MaxAgentInstances = DefaultMaxAgentInstances
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{h: h, opts: opts, log: opts.Logger, draining: make(chan struct{}), clients: map[string]int{}}
	var err error
	if s.acks, err = newAckTable(opts.AckStateFile, opts.MaxAgentInstances, opts.Logger, &s.Stats.AckStateErrors); err != nil {
		return nil, err
	}
	if opts.MaxStreams > 0 {
		s.slots = make(chan struct{}, opts.MaxStreams)
	}
	so := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.MaxMessageBytes),
		grpc.MaxConcurrentStreams(uint32(min(opts.MaxStreamsPerConnection, 1<<31))),
		grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2("proto"), maxFlows: opts.MaxFlowsPerBatch}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: opts.KeepaliveMinTime, PermitWithoutStream: true}),
		// Find dead agents (no FIN/RST) within ~1.5 min.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
	}
	if opts.TLS != nil {
		so = append(so, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	if auth := opts.Authorize; auth != nil {
		so = append(so,
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				ctx, err := auth(ctx, info.FullMethod)
				if err != nil {
					return nil, err
				}
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				ctx, err := auth(ss.Context(), info.FullMethod)
				if err != nil {
					return err
				}
				return h(srv, &authorizedStream{ServerStream: ss, ctx: ctx})
			}))
	}
	s.grpc = grpc.NewServer(so...)
	flowv1.RegisterFlowCollectorServer(s.grpc, s)
	return s, nil
}

// RegisterService adds another gRPC service on the same server (and so
// the same listener, TLS and limits), such as the collector's FlowHistory;
// call it before Serve. It makes a Server a grpc.ServiceRegistrar.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	s.grpc.RegisterService(desc, impl)
}

// Serve accepts agents on l until Shutdown. It returns nil after Shutdown.
func (s *Server) Serve(l net.Listener) error {
	err := s.grpc.Serve(l)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown stops accepting agents, ends every open stream after the batch
// it is handling (agents see Unavailable and will reconnect elsewhere or
// later), and waits for the handlers to return, or until ctx ends, when it
// closes the remaining connections at once. No Handler call is running
// when it returns.
func (s *Server) Shutdown(ctx context.Context) error {
	s.drainOne.Do(func() { close(s.draining) })
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		err = ctx.Err()
	}
	s.loops.Wait()
	s.acks.close()
	return err
}

// authorizedStream is a stream whose context is Options.Authorize's.
type authorizedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authorizedStream) Context() context.Context { return s.ctx }

// decodeTarget receives a message through codec: decoding happens here,
// not in gRPC, so that the flows are counted and measured before they are
// decoded (flowpb.DecodeBatch), and a message that does not parse is
// refused with InvalidArgument rather than gRPC's generic Internal.
type decodeTarget struct {
	flows   []*flowv1.Flow
	refused []flowpb.Refused
	size    int
	err     error
	// withID also reads the batch identity (ExportAcked).
	withID   bool
	instance string
	seq      uint64
}

// codec is gRPC's proto codec, except for decodeTarget.
type codec struct {
	proto    encoding.CodecV2
	maxFlows int
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }
func (codec) Name() string                             { return "proto" }

// RawUnmarshaler is a message that decodes itself from the received
// bytes, before anything else is allocated for it (the collector's
// FlowHistory bounds its requests this way; internal/collector/history).
// It keeps its own error: one returned reaches the client as Internal.
type RawUnmarshaler interface {
	UnmarshalGRPC(data mem.BufferSlice) error
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if u, ok := v.(RawUnmarshaler); ok {
		return u.UnmarshalGRPC(data)
	}
	t, ok := v.(*decodeTarget)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	t.size = data.Len()
	if len(data) == 1 { // no copy: a message that came in one buffer
		t.decode(data[0].ReadOnlyData(), c.maxFlows)
		return nil
	}
	// In pieces: a message that may hold more flows than allowed (each is
	// at least 2 bytes) is counted in place, so that refusing it copies
	// nothing.
	if t.size > 2*c.maxFlows {
		chunks := make([][]byte, len(data))
		for i, b := range data {
			chunks[i] = b.ReadOnlyData()
		}
		if n, err := flowpb.CountFlowsChunks(chunks); err == nil && n > c.maxFlows {
			t.err = &flowpb.TooManyFlowsError{N: n, Max: c.maxFlows}
			return nil
		}
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	t.decode(buf.ReadOnlyData(), c.maxFlows)
	return nil
}

func (t *decodeTarget) decode(b []byte, maxFlows int) {
	t.flows, t.refused, t.err = flowpb.DecodeBatch(b, maxFlows)
	if t.withID {
		// Also for a message refused: its refusal names its seq.
		inst, seq, err := flowpb.BatchID(b)
		if err == nil {
			t.instance, t.seq = inst, seq
		} else if t.err == nil {
			t.err = err
		}
	}
}

// ClientKey is who a client is for Options.MaxStreamsPerClient: the CN of
// its verified certificate, else its IP address (not its port: a client
// reconnects from new ports).
func ClientKey(p Peer) string {
	if p.CommonName != "" {
		return "cn:" + p.CommonName
	}
	if ta, ok := p.Addr.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if p.Addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	return host
}

// admit takes a stream slot of client key, or says why not.
func (s *Server) admit(key string) (release func(), err error) {
	if s.slots != nil {
		select {
		case s.slots <- struct{}{}:
		default:
			s.Stats.Rejected.Add(1)
			s.Stats.StreamsRefused.Add(1)
			return nil, status.Errorf(codes.ResourceExhausted, "collector: %d agent streams already open (--max-agents)", s.opts.MaxStreams)
		}
	}
	if max := s.opts.MaxStreamsPerClient; max > 0 {
		s.mu.Lock()
		if s.clients[key] >= max {
			s.mu.Unlock()
			if s.slots != nil {
				<-s.slots
			}
			s.Stats.Rejected.Add(1)
			s.Stats.StreamsRefusedClient.Add(1)
			return nil, status.Errorf(codes.ResourceExhausted, "collector: client %s already has %d streams open (--max-agents-per-client)", key, max)
		}
		s.clients[key]++
		s.mu.Unlock()
	}
	return func() {
		if s.opts.MaxStreamsPerClient > 0 {
			s.mu.Lock()
			if s.clients[key]--; s.clients[key] <= 0 {
				delete(s.clients, key)
			}
			s.mu.Unlock()
		}
		if s.slots != nil {
			<-s.slots
		}
	}, nil
}

// openStream admits an agent stream of the caller of ctx (the stream
// bounds, its slot) and counts it open, logging opened at debug level;
// end releases and uncounts it. A refused stream is logged and its error
// returned.
func (s *Server) openStream(ctx context.Context, opened string) (p Peer, end func(), err error) {
	p = peerOf(ctx)
	release, err := s.admit(ClientKey(p))
	if err != nil {
		s.log.Warn("refused an agent stream", "peer", p.Addr, "cn", p.CommonName, "error", err)
		return p, nil, err
	}
	s.Stats.Streams.Add(1)
	s.Stats.StreamsTotal.Add(1)
	s.log.Debug(opened, "peer", p.Addr, "cn", p.CommonName)
	return p, func() {
		s.Stats.Streams.Add(-1)
		release()
	}, nil
}

// Export implements flowv1.FlowCollectorServer: one call per agent stream.
func (s *Server) Export(stream grpc.ClientStreamingServer[flowv1.FlowBatch, flowv1.ExportSummary]) error {
	ctx := stream.Context()
	p, end, err := s.openStream(ctx, "agent stream opened")
	if err != nil {
		return err
	}
	defer end()

	// The receive loop runs apart so that Shutdown can end the stream while
	// the loop waits in RecvMsg; returning from here cancels ctx, which
	// ends that wait. Shutdown waits for the loop.
	var sum flowv1.ExportSummary
	done := make(chan error, 1)
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		done <- s.receive(ctx, stream, p, &sum)
	}()
	select {
	case err := <-done:
		if err == nil {
			return stream.SendAndClose(&sum)
		}
		return err
	case <-s.draining:
		return status.Error(codes.Unavailable, "collector: shutting down")
	}
}

// receive handles batches until the agent closes the stream (nil) or
// something goes wrong (a gRPC status).
func (s *Server) receive(ctx context.Context, stream grpc.ServerStream, p Peer, sum *flowv1.ExportSummary) error {
	for {
		t := &decodeTarget{}
		err := stream.RecvMsg(t)
		if errors.Is(err, io.EOF) {
			s.log.Debug("agent stream closed", "peer", p.Addr, "batches", sum.Batches, "flows", sum.Flows)
			return nil
		}
		if err != nil {
			if status.Code(err) == codes.ResourceExhausted {
				s.Stats.Rejected.Add(1)
				s.log.Warn("refused an oversized message", "peer", p.Addr, "error", err)
			}
			return err
		}
		if err := s.checkMessage(t, p); err != nil {
			return err
		}
		if len(t.flows) == 0 {
			continue
		}
		if err := s.handle(ctx, p, t); err != nil {
			_, err = refusal(err)
			return err
		}
		sum.Batches++
		sum.Flows += uint64(len(t.flows))
	}
}

// checkMessage refuses a message of too many flows (ResourceExhausted) or
// that did not decode (InvalidArgument), and counts its flows refused for
// their bounds.
func (s *Server) checkMessage(t *decodeTarget, p Peer) error {
	var tooMany *flowpb.TooManyFlowsError
	if errors.As(t.err, &tooMany) {
		s.Stats.Rejected.Add(1)
		s.Stats.RefusedTooMany.Add(uint64(tooMany.N))
		s.log.Warn("refused a message of too many flows", "peer", p.Addr, "error", t.err)
		return status.Errorf(codes.ResourceExhausted, "collector: %v", t.err)
	}
	if t.err != nil {
		s.Stats.Rejected.Add(1)
		s.Stats.Malformed.Add(1)
		s.log.Warn("refused a malformed message", "peer", p.Addr, "error", t.err)
		return status.Errorf(codes.InvalidArgument, "collector: malformed FlowBatch: %v", t.err)
	}
	if len(t.refused) > 0 {
		s.Stats.RefusedBounds.Add(uint64(len(t.refused)))
		s.warnRefused(p, len(t.refused), t.refused[0])
	}
	return nil
}

// handle hands a message's flows to the Handler and counts them; an error
// is the status that ends the stream.
func (s *Server) handle(ctx context.Context, p Peer, t *decodeTarget) error {
	if err := s.h(ctx, &Batch{Peer: p, Flows: t.flows}); err != nil {
		s.Stats.HandlerErrors.Add(1)
		refused, err := refusal(err)
		if _, ok := status.FromError(err); !ok {
			err = status.Errorf(codes.Unavailable, "collector: %v", err)
		}
		if refused {
			return Refuse(err)
		}
		return err
	}
	s.Stats.Batches.Add(1)
	s.Stats.Flows.Add(uint64(len(t.flows)))
	s.Stats.Bytes.Add(uint64(t.size))
	return nil
}

// warnRefused logs flows refused for a bound, at most every 10 s (a
// sender may do it on every message; the counter has every one).
func (s *Server) warnRefused(p Peer, n int, first flowpb.Refused) {
	now := time.Now().UnixNano()
	last := s.lastWarn.Load()
	if now-last < int64(10*time.Second) || !s.lastWarn.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("refused flows beyond a bound (counted in refused_flows_total)", "peer", p.Addr, "cn", p.CommonName,
		"flows", n, "first", fmt.Sprintf("flows[%d].%v", first.Index, first.Err))
}

func peerOf(ctx context.Context) Peer {
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return Peer{}
	}
	out := Peer{Addr: pr.Addr}
	if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		out.CommonName = ti.State.PeerCertificates[0].Subject.CommonName
	}
	return out
}

// ServerTLS serves the certificate and key in certFile and keyFile and,
// when clientCAFile is set, requires every agent to present a certificate
// signed by that CA (mTLS).
//
// The files are read again at each handshake and parsed when their bytes
// changed, so a rotated certificate (a Secret volume the kubelet updates
// by swapping a symlink, cert-manager renewing it) is served to the next
// connection without a restart; connections already open keep theirs. If
// the new files do not make a valid pair (read half-way through an
// update), the last good ones are kept and the handshake goes on.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	return serverTLS(certFile, keyFile, clientCAFile, false)
}

// ServerTLSClientCertOptional is ServerTLS verifying the client
// certificates of clientCAFile that are presented, but letting a client
// without one through to Options.Authorize, which then wants another
// credential (a bearer token): agents with certificates and readers
// without share the server.
func ServerTLSClientCertOptional(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	return serverTLS(certFile, keyFile, clientCAFile, true)
}

func serverTLS(certFile, keyFile, clientCAFile string, optionalClientCert bool) (*tls.Config, error) {
	r := &serverFiles{cert: certFile, key: keyFile, ca: clientCAFile}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	clientAuth := tls.NoClientCert
	if clientCAFile != "" {
		clientAuth = tls.RequireAndVerifyClientCert
		if optionalClientCert {
			clientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, ClientAuth: clientAuth,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := r.load()
			if err != nil {
				return nil, err
			}
			return &tls.Config{MinVersion: tls.VersionTLS12, ClientAuth: clientAuth, Certificates: c.Certificates, ClientCAs: c.ClientCAs}, nil
		}}, nil
}

// serverFiles is ServerTLS's files and what was last parsed from them.
type serverFiles struct {
	cert, key, ca string

	mu                     sync.Mutex
	certPEM, keyPEM, caPEM []byte
	last                   *tls.Config // Certificates and ClientCAs of the bytes above
}

// load returns the certificate and client CAs of the files as they are now,
// parsed again only when their bytes changed; the last good ones when the
// new bytes do not parse (after the first load, which must succeed).
func (r *serverFiles) load() (*tls.Config, error) {
	certPEM, err1 := os.ReadFile(r.cert)
	keyPEM, err2 := os.ReadFile(r.key)
	var caPEM []byte
	var err3 error
	if r.ca != "" {
		caPEM, err3 = os.ReadFile(r.ca)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := errors.Join(err1, err2, err3); err != nil {
		if r.last != nil {
			return r.last, nil
		}
		return nil, fmt.Errorf("collector: read the server's TLS files: %w", err)
	}
	if r.last != nil && bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) && bytes.Equal(caPEM, r.caPEM) {
		return r.last, nil
	}
	next, err := parseServerFiles(certPEM, keyPEM, caPEM, r.ca)
	if err != nil {
		if r.last != nil {
			return r.last, nil
		}
		return nil, err
	}
	r.certPEM, r.keyPEM, r.caPEM, r.last = certPEM, keyPEM, caPEM, next
	return next, nil
}

func parseServerFiles(certPEM, keyPEM, caPEM []byte, caFile string) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("collector: load server certificate: %w", err)
	}
	out := &tls.Config{Certificates: []tls.Certificate{cert}}
	if caFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("collector: no certificate in %s", caFile)
		}
		out.ClientCAs = pool
	}
	return out, nil
}

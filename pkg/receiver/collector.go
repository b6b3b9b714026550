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
// Every message is checked before the handler sees it: a message larger than
// Options.MaxMessageBytes ends its stream with ResourceExhausted (gRPC's own
// size check, before decoding), one that does not decode or holds an invalid
// flow (flowpb.Validate) ends its stream with InvalidArgument, a batch with
// more than Options.MaxFlowsPerBatch flows with ResourceExhausted. Only that
// stream ends: the server keeps serving every other agent, and the agent
// that sent it reconnects.
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
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// Defaults of Options.
const (
	DefaultMaxMessageBytes  = 16 << 20
	DefaultMaxFlowsPerBatch = 100_000
	DefaultMaxStreams       = 4096
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
// one stream. It may keep the batch. A non-nil error ends the agent's stream
// with the error's gRPC status if it has one, Unavailable otherwise (the
// agent then reconnects after a backoff and goes on).
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
	Logger           *slog.Logger
}

// Stats are cumulative counts, safe to read concurrently.
type Stats struct {
	Streams       atomic.Int64  // streams open now
	StreamsTotal  atomic.Uint64 // streams accepted since start
	Batches       atomic.Uint64 // batches handed to the Handler
	Flows         atomic.Uint64 // flows in those batches
	Bytes         atomic.Uint64 // wire bytes of those batches
	Rejected      atomic.Uint64 // messages refused (malformed, invalid, oversized)
	Malformed     atomic.Uint64 // of those, messages that did not decode or held an invalid flow
	HandlerErrors atomic.Uint64 // batches the Handler returned an error for
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
	draining chan struct{}
	drainOne sync.Once
	loops    sync.WaitGroup // stream receive loops
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
	if opts.KeepaliveMinTime <= 0 {
		opts.KeepaliveMinTime = DefaultKeepaliveMinTime
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{h: h, opts: opts, log: opts.Logger, draining: make(chan struct{})}
	if opts.MaxStreams > 0 {
		s.slots = make(chan struct{}, opts.MaxStreams)
	}
	so := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.MaxMessageBytes),
		grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2("proto")}),
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
	return err
}

// authorizedStream is a stream whose context is Options.Authorize's.
type authorizedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authorizedStream) Context() context.Context { return s.ctx }

// decodeTarget receives a message through codec: decoding happens here,
// not in gRPC, so that a message that does not parse is refused with
// InvalidArgument rather than gRPC's generic Internal.
type decodeTarget struct {
	msg  flowv1.FlowBatch
	size int
	err  error
}

// codec is gRPC's proto codec, except for decodeTarget.
type codec struct{ proto encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }
func (codec) Name() string                             { return "proto" }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	t, ok := v.(*decodeTarget)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	t.size = data.Len()
	t.err = proto.Unmarshal(buf.ReadOnlyData(), &t.msg)
	return nil
}

// Export implements flowv1.FlowCollectorServer: one call per agent stream.
func (s *Server) Export(stream grpc.ClientStreamingServer[flowv1.FlowBatch, flowv1.ExportSummary]) error {
	if s.slots != nil {
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		default:
			s.Stats.Rejected.Add(1)
			return status.Errorf(codes.ResourceExhausted, "collector: %d agent streams already open", s.opts.MaxStreams)
		}
	}
	ctx := stream.Context()
	p := peerOf(ctx)
	s.Stats.Streams.Add(1)
	s.Stats.StreamsTotal.Add(1)
	defer s.Stats.Streams.Add(-1)
	s.log.Debug("agent stream opened", "peer", p.Addr, "cn", p.CommonName)

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
		if t.err != nil {
			s.Stats.Rejected.Add(1)
			s.Stats.Malformed.Add(1)
			s.log.Warn("refused a malformed message", "peer", p.Addr, "error", t.err)
			return status.Errorf(codes.InvalidArgument, "collector: malformed FlowBatch: %v", t.err)
		}
		flows := t.msg.Flows
		if len(flows) > s.opts.MaxFlowsPerBatch {
			s.Stats.Rejected.Add(1)
			return status.Errorf(codes.ResourceExhausted, "collector: %d flows in one message, max %d", len(flows), s.opts.MaxFlowsPerBatch)
		}
		for i, f := range flows {
			if err := flowpb.Validate(f); err != nil {
				s.Stats.Rejected.Add(1)
				s.Stats.Malformed.Add(1)
				s.log.Warn("refused an invalid flow", "peer", p.Addr, "error", err)
				return status.Errorf(codes.InvalidArgument, "collector: flows[%d]: %v", i, err)
			}
		}
		if len(flows) == 0 {
			continue
		}
		if err := s.h(ctx, &Batch{Peer: p, Flows: flows}); err != nil {
			s.Stats.HandlerErrors.Add(1)
			if _, ok := status.FromError(err); ok {
				return err
			}
			return status.Errorf(codes.Unavailable, "collector: %v", err)
		}
		sum.Batches++
		sum.Flows += uint64(len(flows))
		s.Stats.Batches.Add(1)
		s.Stats.Flows.Add(uint64(len(flows)))
		s.Stats.Bytes.Add(uint64(t.size))
	}
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

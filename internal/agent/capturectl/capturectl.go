// Package capturectl is the agent's end of packet capture's control stream
// (issue #32, docs/capture.md): the agent keeps one AgentCapture stream
// open to the collector it exports to, on the gRPC exporter's own
// connection (same target, TLS and token), reconnecting with backoff. The
// collector sends capture requests on it; each runs in the capture engine
// (package capture) and its packets go back on the same stream, in
// batches, then its end report.
//
// A capture lives inside its stream: when the stream ends (the collector
// crashed or went away, the network broke) its context ends every capture
// running for it, so no agent captures for nobody. The collector cancels a
// capture whose caller went away with a cancel command.
package capturectl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/agent/capture"
)

// Engine runs one capture: capture.Capturer is the real one.
type Engine interface {
	Run(ctx context.Context, f capture.Filter, l capture.Limits, emit func(capture.Packet) error) (capture.Result, error)
}

// Defaults of Config.
const (
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = 30 * time.Second
	// DefaultMaxCaptures bounds the captures an agent runs at once: the
	// engine's limit, which the memory budget is divided by.
	DefaultMaxCaptures = capture.MaxConcurrent
	// batchPackets and batchDelay: packets go to the collector in
	// messages of up to batchPackets, or after batchDelay.
	batchPackets = 128
	batchDelay   = 50 * time.Millisecond
	// queuePackets is the hand-over between the engine and the batcher
	// (the engine's own queue, bounded in bytes, holds the backlog).
	queuePackets = batchPackets
)

// Config is what the control stream needs.
type Config struct {
	// Conn is the connection to the collector (the gRPC exporter's).
	Conn grpc.ClientConnInterface
	// Node is the agent's node name (the hello's; with --auth kubernetes
	// the collector takes its token's).
	Node string
	// Engine runs captures; nil: capture is disabled (--capture=false),
	// requests are answered with an error saying so.
	Engine Engine
	// MaxSnaplen clamps every request's snaplen (--capture-max-snaplen);
	// a request of 0 gets it.
	MaxSnaplen uint32
	// MaxCaptures bounds the captures running at once (default
	// DefaultMaxCaptures); more are refused.
	MaxCaptures int
	// Backoff between attempts to open the stream.
	BackoffBase, BackoffMax time.Duration
	Logger                  *slog.Logger
}

// Run keeps the control stream open until ctx ends; it returns ctx's error.
func Run(ctx context.Context, cfg Config) error {
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = DefaultBackoffBase
	}
	if cfg.BackoffMax < cfg.BackoffBase {
		cfg.BackoffMax = max(DefaultBackoffMax, cfg.BackoffBase)
	}
	if cfg.MaxCaptures <= 0 {
		cfg.MaxCaptures = DefaultMaxCaptures
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("component", "capture")
	client := flowv1.NewPacketCaptureClient(cfg.Conn)
	failures := 0
	for ctx.Err() == nil {
		start := time.Now()
		err := session(ctx, client, &cfg, log)
		if ctx.Err() != nil {
			break
		}
		if status.Code(err) == codes.Unimplemented {
			// A collector without packet capture: ask again now and then
			// (it may be upgraded), quietly.
			log.Debug("the collector serves no packet capture", "error", err)
			failures = 100
		} else if time.Since(start) > cfg.BackoffMax {
			failures = 0 // the stream was up for a while: start over
		}
		failures++
		d := backoff(cfg.BackoffBase, cfg.BackoffMax, failures)
		if failures == 1 || failures%10 == 0 {
			log.Debug("capture stream ended: reconnecting", "error", err, "retry_in", d.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	return ctx.Err()
}

func backoff(base, maxD time.Duration, n int) time.Duration {
	d := float64(base)
	for i := 1; i < n && d < float64(maxD); i++ {
		d *= 1.6
	}
	d = min(d, float64(maxD))
	return time.Duration(d * (0.8 + 0.4*rand.Float64()))
}

// stream is one open control stream.
type stream struct {
	cfg *Config
	log *slog.Logger
	out chan *flowv1.AgentCaptureMessage

	mu      sync.Mutex
	running map[uint64]context.CancelFunc
	wg      sync.WaitGroup
}

// session opens one control stream and serves it until it ends; every
// capture it started has ended when it returns.
func session(ctx context.Context, client flowv1.PacketCaptureClient, cfg *Config, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := client.AgentCapture(ctx)
	if err != nil {
		return err
	}
	hello := &flowv1.AgentHello{Node: cfg.Node, Enabled: cfg.Engine != nil, MaxSnaplen: cfg.MaxSnaplen}
	if err := st.Send(&flowv1.AgentCaptureMessage{Message: &flowv1.AgentCaptureMessage_Hello{Hello: hello}}); err != nil {
		return err
	}
	s := &stream{cfg: cfg, log: log, out: make(chan *flowv1.AgentCaptureMessage, 64), running: map[uint64]context.CancelFunc{}}
	defer s.wg.Wait()
	defer cancel() // the captures end with the stream
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case m := <-s.out:
				if err := st.Send(m); err != nil {
					sendErr <- err
					cancel()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		cmd, err := st.Recv()
		if err != nil {
			select {
			case e := <-sendErr:
				return e
			default:
			}
			return err
		}
		switch x := cmd.Command.(type) {
		case *flowv1.CaptureCommand_Start:
			s.start(ctx, x.Start)
		case *flowv1.CaptureCommand_Cancel:
			s.mu.Lock()
			if c := s.running[x.Cancel]; c != nil {
				c()
			}
			s.mu.Unlock()
		}
	}
}

// start runs one capture in the background.
func (s *stream) start(ctx context.Context, req *flowv1.CaptureStart) {
	id := req.GetCaptureId()
	refuse := func(msg string) {
		s.send(ctx, &flowv1.AgentCaptureMessage{Message: &flowv1.AgentCaptureMessage_End{End: &flowv1.AgentCaptureEnd{
			CaptureId: id, End: &flowv1.NodeCaptureEnd{Error: msg}}}})
	}
	if s.cfg.Engine == nil {
		refuse("capture is disabled on this node's agent (--capture=false; the operator's spec.agent.capture.enable)")
		return
	}
	f, err := Filter(req.GetFilter())
	if err != nil {
		refuse(err.Error())
		return
	}
	lim := capture.Limits{Snaplen: req.GetSnaplen(), MaxPackets: req.GetMaxPackets(), MaxBytes: req.GetMaxBytes()}
	if d := req.GetDuration(); d != nil {
		lim.Duration = d.AsDuration()
	}
	if lim.Snaplen == 0 || (s.cfg.MaxSnaplen > 0 && lim.Snaplen > s.cfg.MaxSnaplen) {
		lim.Snaplen = s.cfg.MaxSnaplen
	}
	s.mu.Lock()
	if len(s.running) >= s.cfg.MaxCaptures {
		s.mu.Unlock()
		refuse(fmt.Sprintf("this node's agent runs %d captures already, its maximum", s.cfg.MaxCaptures))
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	s.running[id] = cancel
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.running, id)
			s.mu.Unlock()
			cancel()
		}()
		end := s.run(cctx, id, f, lim)
		if end.Snaplen == 0 {
			end.Snaplen = lim.Snaplen
		}
		s.send(ctx, &flowv1.AgentCaptureMessage{Message: &flowv1.AgentCaptureMessage_End{End: &flowv1.AgentCaptureEnd{CaptureId: id, End: end}}})
	}()
}

// run runs the engine, batching its packets onto the stream.
func (s *stream) run(ctx context.Context, id uint64, f capture.Filter, lim capture.Limits) *flowv1.NodeCaptureEnd {
	q := make(chan *flowv1.CapturedPacket, queuePackets)
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		s.batch(ctx, id, q)
	}()
	// emit waits for the batcher: the engine's queue, bounded in bytes from
	// the memory budget, is the one that holds packets and counts what it
	// cannot take ("consumer"); a second queue here would hold up to
	// queuePackets copies of any size.
	res, err := s.cfg.Engine.Run(ctx, f, lim, func(p capture.Packet) error {
		select {
		case q <- Packet(p):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	close(q)
	<-flushed
	end := &flowv1.NodeCaptureEnd{Packets: res.Packets, Bytes: res.Bytes, Reason: res.Reason,
		NotCaptured: map[string]uint64{}, Snaplen: res.Snaplen}
	for r, n := range res.NotCaptured {
		end.NotCaptured[r] += n
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		end.Error = err.Error()
	}
	if end.Reason == "" {
		end.Reason = "canceled"
	}
	return end
}

// batch sends q's packets in messages of up to batchPackets, at least
// every batchDelay, until q closes.
func (s *stream) batch(ctx context.Context, id uint64, q <-chan *flowv1.CapturedPacket) {
	var buf []*flowv1.CapturedPacket
	t := time.NewTicker(batchDelay)
	defer t.Stop()
	flush := func() {
		if len(buf) == 0 {
			return
		}
		s.send(ctx, &flowv1.AgentCaptureMessage{Message: &flowv1.AgentCaptureMessage_Packets{Packets: &flowv1.AgentCapturePackets{
			CaptureId: id, Packets: buf}}})
		buf = nil
	}
	for {
		select {
		case p, ok := <-q:
			if !ok {
				flush()
				return
			}
			buf = append(buf, p)
			if len(buf) >= batchPackets {
				flush()
			}
		case <-t.C:
			flush()
		}
	}
}

// send queues m for the stream (waiting while it is full), unless the
// stream ended.
func (s *stream) send(ctx context.Context, m *flowv1.AgentCaptureMessage) {
	select {
	case s.out <- m:
	case <-ctx.Done():
	}
}

// Filter is a request's filter for the engine.
func Filter(f *flowv1.CaptureFilter) (capture.Filter, error) {
	var out capture.Filter
	if f == nil {
		return out, nil
	}
	var err error
	for _, x := range []struct {
		in  []string
		out *[]netip.Prefix
	}{{f.Ip, &out.CIDRs}, {f.FromIp, &out.SrcCIDRs}, {f.ToIp, &out.DstCIDRs}, {f.PeerIp, &out.PeerCIDRs}} {
		for _, s := range x.in {
			p, perr := netip.ParsePrefix(s)
			if perr != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil {
					err = errors.Join(err, fmt.Errorf("capture filter: %q is not an address or CIDR", s))
					continue
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			*x.out = append(*x.out, p.Masked())
		}
	}
	for _, x := range []struct {
		in  []uint32
		out *[]uint16
	}{{f.Port, &out.Ports}, {f.FromPort, &out.SrcPorts}, {f.ToPort, &out.DstPorts}} {
		for _, p := range x.in {
			if p > 65535 {
				err = errors.Join(err, fmt.Errorf("capture filter: port %d", p))
				continue
			}
			*x.out = append(*x.out, uint16(p))
		}
	}
	for _, p := range f.Protocol {
		if p > 255 {
			err = errors.Join(err, fmt.Errorf("capture filter: protocol %d", p))
			continue
		}
		out.Protocols = append(out.Protocols, uint8(p))
	}
	for _, m := range f.TcpFlags {
		out.TCPFlags = append(out.TCPFlags, uint16(m))
	}
	out.Direction = capture.Direction(f.Direction)
	out.Interfaces = append(out.Interfaces, f.Interface...)
	return out, err
}

// Packet is a captured packet for the stream: Ethernet, or raw IP from a
// device without an Ethernet header (the engine says which).
func Packet(p capture.Packet) *flowv1.CapturedPacket {
	lt := uint32(LinkEthernet)
	if p.RawIP {
		lt = LinkRaw
	}
	return &flowv1.CapturedPacket{Interface: p.Interface, Ifindex: p.Ifindex, Netns: p.Netns, NetnsId: p.NetnsID,
		Direction: flowv1.CaptureDirection(p.Direction), TimeUnixNano: p.Time.UnixNano(), WireLength: p.WireLen,
		Data: p.Data, LinkType: lt}
}

// The pcap link types of CapturedPacket.link_type.
const (
	LinkEthernet = 1
	LinkRaw      = 101
)

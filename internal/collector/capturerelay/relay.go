// Package capturerelay is the collector's side of packet capture (issue
// #32, docs/capture.md): the PacketCapture service of api/flow/v1 on the
// collector's gRPC listener. Every agent that exports to the collector
// keeps an AgentCapture stream open to it (the agent dials, so no agent
// needs to be reachable, and the stream rides on the agent's own TLS and
// token); `flowlens capture` calls Capture. The relay resolves the
// request's names (namespace, pod, workload) to addresses and their nodes
// with the collector's Kubernetes metadata, sends the capture to the
// agents of the nodes that can see matching packets only, passes their
// packets on with both ends' Kubernetes context, and ends with a report
// of what each node captured and could not.
//
// No capture outlives its caller or its stream: when the caller goes away
// the relay cancels the capture on the agents, and an agent ends every
// capture of a stream that ends (the collector crashed, the network
// broke). The relay's buffers are bounded: packets it cannot pass on are
// counted (reason "relay"), never waited for.
package capturerelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/flowquery"
)

// The bounds of a capture when the request leaves them unset.
const (
	DefaultDuration = 30 * time.Second
	DefaultMaxBytes = 50 << 20
	// MaxDuration bounds what a caller may ask.
	MaxDuration = time.Hour
	// endGrace is how long past its duration (or past a cancel) the relay
	// waits for the agents' end reports before it reports them missing.
	endGrace = 10 * time.Second
	// packetBuffer and bufferBytes bound the packets waiting for a slow
	// caller, in number and in data (a snaplen may be 65000 bytes); more
	// are counted as not captured (reason "relay").
	packetBuffer = 8192
	bufferBytes  = 16 << 20
	// commandBuffer is how many commands wait for an agent's stream.
	commandBuffer = 64
)

// helloTimeout is how long a new AgentCapture stream may take to say
// hello: a stream that says nothing does not hold its goroutines (a
// variable for its test).
var helloTimeout = 10 * time.Second

// Metric names (docs/metrics.md).
const (
	MetricRunning     = "flowlens_collector_captures_running"
	MetricPackets     = "flowlens_collector_capture_packets_total"
	MetricLostPackets = "flowlens_collector_capture_lost_packets_total"
	MetricStreams     = "flowlens_collector_capture_streams"
	MetricRefused     = "flowlens_collector_capture_streams_refused_total"
)

// The reasons of MetricRefused.
const (
	// RefusedMaxAgents: a stream refused because MaxStreams were open.
	RefusedMaxAgents = "max_agents"
	// RefusedReplaced: an open stream ended by a newer one of the same
	// agent identity (its node).
	RefusedReplaced = "replaced"
)

// Options are the relay's links to the rest of the collector.
type Options struct {
	// Lister resolves names to addresses; nil: requests naming a
	// namespace, pod or workload are refused.
	Lister k8smeta.Lister
	// Resolve gives a packet's ends their context; nil: none.
	Resolve func(netip.Addr) (enriched.K8sContext, bool)
	// AgentNode is the node of an AgentCapture caller as authorization
	// established it (false: no identity, --auth none: the agent's hello
	// says it).
	AgentNode func(ctx context.Context) (string, bool)
	// User names a Capture caller in the log ("" : unknown).
	User func(ctx context.Context) string
	// Recheck, called every RecheckEvery on an open AgentCapture stream,
	// ends it with its error: the agent's token expired or its permission
	// was revoked (as its Export streams are).
	Recheck      func(ctx context.Context) error
	RecheckEvery time.Duration
	// MaxStreams bounds the AgentCapture streams open at once (the
	// collector's --max-agents; 0 or less: unlimited). Each agent
	// identity (node) has one: a newer stream of a node ends the older.
	MaxStreams int
	Logger     *slog.Logger
}

// Service is the PacketCapture service.
type Service struct {
	flowv1.UnimplementedPacketCaptureServer
	opts Options
	log  *slog.Logger

	nextID  atomic.Uint64
	running atomic.Int64
	packets prometheus.Counter
	lost    *prometheus.CounterVec
	refused *prometheus.CounterVec

	mu     sync.Mutex
	agents map[string]*agent // by node: the latest stream of each node
}

// New returns a Service; Register serves it.
func New(opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Service{opts: opts, log: opts.Logger, agents: map[string]*agent{},
		packets: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricPackets,
			Help: "Packets captured by the agents and passed on to `flowlens capture` callers."}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricLostPackets,
			Help: "Matching packets not captured, by reason: ring_full and consumer (the agents'), relay (the collector could not pass them on fast enough)."},
			[]string{"reason"}),
	}
	for _, r := range []string{"ring_full", "consumer", "relay"} {
		s.lost.WithLabelValues(r)
	}
	s.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRefused,
		Help: "Agent capture streams (AgentCapture) refused or ended, by reason: max_agents (--max-agents capture streams were open), replaced (a newer stream of the same agent identity ended it)."},
		[]string{"reason"})
	for _, r := range []string{RefusedMaxAgents, RefusedReplaced} {
		s.refused.WithLabelValues(r)
	}
	return s
}

// Register serves the service on srv (the collector's gRPC server).
func (s *Service) Register(srv interface {
	RegisterService(*grpc.ServiceDesc, any)
}) {
	srv.RegisterService(&flowv1.PacketCapture_ServiceDesc, s)
}

// Collectors are the relay's metrics.
func (s *Service) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricRunning, Help: "Packet captures running (Capture calls)."},
			func() float64 { return float64(s.running.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricStreams, Help: "Agent capture streams (AgentCapture) open, one per agent identity (node)."},
			func() float64 { s.mu.Lock(); defer s.mu.Unlock(); return float64(len(s.agents)) }),
		s.packets, s.lost, s.refused,
	}
}

// Agents are the nodes whose agents have a capture stream open.
func (s *Service) Agents() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.agents))
}

// agent is one open AgentCapture stream.
type agent struct {
	node       string
	enabled    bool
	maxSnaplen uint32
	send       chan *flowv1.CaptureCommand
	done       chan struct{} // the stream ended
	// replace ends the stream: a newer one of its node took its place.
	replace context.CancelCauseFunc

	mu       sync.Mutex
	sessions map[uint64]*session
}

// session is one capture as one agent runs it.
type session struct {
	c    *capture
	node string
}

// capture is one Capture call.
type capture struct {
	id      uint64
	packets chan *flowv1.CapturedPacket
	ends    chan *flowv1.NodeCaptureEnd
	relay   atomic.Uint64 // packets the buffer could not take
	// buffered is the data of the packets in packets (bufferBytes).
	buffered atomic.Int64
}

// offer queues p for the caller unless the buffer is full, in packets or
// in bytes; what it cannot take is counted (reason "relay").
func (c *capture) offer(p *flowv1.CapturedPacket) {
	n := int64(len(p.Data))
	if c.buffered.Load()+n > bufferBytes {
		c.relay.Add(1)
		return
	}
	select {
	case c.packets <- p:
		c.buffered.Add(n)
	default:
		c.relay.Add(1)
	}
}

// took accounts for a packet taken from packets.
func (c *capture) took(p *flowv1.CapturedPacket) { c.buffered.Add(-int64(len(p.Data))) }

// AgentCapture is an agent's control stream.
func (s *Service) AgentCapture(stream grpc.BidiStreamingServer[flowv1.AgentCaptureMessage, flowv1.CaptureCommand]) error {
	ctx, replace := context.WithCancelCause(stream.Context())
	defer replace(nil)
	// The hello within helloTimeout, or the stream ends.
	helloTimer := time.AfterFunc(helloTimeout, func() {
		replace(status.Errorf(codes.DeadlineExceeded, "capture: no hello within %s", helloTimeout))
	})
	type recv struct {
		m   *flowv1.AgentCaptureMessage
		err error
	}
	firstc := make(chan recv, 1)
	go func() {
		m, err := stream.Recv()
		firstc <- recv{m, err}
	}()
	var first *flowv1.AgentCaptureMessage
	select {
	case r := <-firstc:
		if r.err != nil {
			return r.err
		}
		first = r.m
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	helloTimer.Stop()
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "capture: the first message of AgentCapture must be a hello")
	}
	node := hello.GetNode()
	if s.opts.AgentNode != nil {
		if n, ok := s.opts.AgentNode(ctx); ok {
			node = n
		}
	}
	if node == "" {
		return status.Error(codes.InvalidArgument, "capture: the agent's hello names no node")
	}
	a := &agent{node: node, enabled: hello.GetEnabled(), maxSnaplen: hello.GetMaxSnaplen(), replace: replace,
		send: make(chan *flowv1.CaptureCommand, commandBuffer), done: make(chan struct{}), sessions: map[uint64]*session{}}
	// One stream per agent identity, MaxStreams in all: a hostile client
	// cannot open many. A newer stream of a node ends the older (an agent
	// reconnecting while its old connection is half open must not wait
	// for it to time out).
	s.mu.Lock()
	old := s.agents[node]
	if old == nil && s.opts.MaxStreams > 0 && len(s.agents) >= s.opts.MaxStreams {
		s.mu.Unlock()
		s.refused.WithLabelValues(RefusedMaxAgents).Inc()
		s.log.Warn("capture: agent stream refused: --max-agents capture streams open", "node", node, "max_agents", s.opts.MaxStreams)
		return status.Errorf(codes.ResourceExhausted, "capture: %d agent capture streams are open (the collector's --max-agents)", s.opts.MaxStreams)
	}
	s.agents[node] = a
	s.mu.Unlock()
	if old != nil {
		s.refused.WithLabelValues(RefusedReplaced).Inc()
		s.log.Warn("capture: a newer capture stream of this agent replaced its open one", "node", node)
		old.replace(status.Error(codes.Aborted, "capture: a newer capture stream of this agent (node) replaced this one"))
	}
	s.log.Debug("capture: agent connected", "node", node, "enabled", a.enabled)
	defer func() {
		s.mu.Lock()
		if s.agents[node] == a {
			delete(s.agents, node)
		}
		s.mu.Unlock()
		close(a.done)
		// The captures this agent ran end with it (the agent ends them
		// too: its stream's context is theirs).
		a.mu.Lock()
		for id, se := range a.sessions {
			delete(a.sessions, id)
			se.c.ends <- &flowv1.NodeCaptureEnd{Node: node, Reason: "canceled", Error: "the agent's capture stream ended"}
		}
		a.mu.Unlock()
	}()
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case cmd := <-a.send:
				if err := stream.Send(cmd); err != nil {
					sendErr <- err
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	recvd := make(chan *flowv1.AgentCaptureMessage)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case recvd <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	var recheck <-chan time.Time
	if s.opts.Recheck != nil && s.opts.RecheckEvery > 0 {
		t := time.NewTicker(s.opts.RecheckEvery)
		defer t.Stop()
		recheck = t.C
	}
	for {
		select {
		case <-recheck:
			if err := s.opts.Recheck(ctx); err != nil {
				return err
			}
		case err := <-sendErr:
			return err
		case err := <-recvErr:
			if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-ctx.Done():
			if err := context.Cause(ctx); status.Code(err) != codes.Unknown {
				return err // replaced
			}
			return ctx.Err()
		case m := <-recvd:
			switch x := m.Message.(type) {
			case *flowv1.AgentCaptureMessage_Packets:
				a.mu.Lock()
				se := a.sessions[x.Packets.GetCaptureId()]
				a.mu.Unlock()
				if se == nil {
					continue // a capture that ended: late packets
				}
				for _, p := range x.Packets.GetPackets() {
					p.Node = node
					s.context(p)
					se.c.offer(p)
				}
			case *flowv1.AgentCaptureMessage_End:
				a.mu.Lock()
				se := a.sessions[x.End.GetCaptureId()]
				delete(a.sessions, x.End.GetCaptureId())
				a.mu.Unlock()
				if se == nil {
					continue
				}
				end := x.End.GetEnd()
				if end == nil {
					end = &flowv1.NodeCaptureEnd{}
				}
				end.Node = node
				se.c.ends <- end
			}
		}
	}
}

// context sets the Kubernetes context of a packet's ends.
func (s *Service) context(p *flowv1.CapturedPacket) {
	if s.opts.Resolve == nil {
		return
	}
	src, dst, ok := addresses(p.GetData(), p.GetLinkType())
	if !ok {
		return
	}
	for _, x := range []struct {
		a   netip.Addr
		out **flowv1.K8SContext
	}{{src, &p.SrcK8S}, {dst, &p.DstK8S}} {
		if m, ok := s.opts.Resolve(x.a); ok {
			*x.out = &flowv1.K8SContext{Kind: string(m.Kind), Namespace: m.Namespace, Name: m.Name, Workload: m.Workload,
				WorkloadKind: m.WorkloadKind, Node: m.Node, Subnet: m.Subnet}
		}
	}
}

// addresses reads a packet's IP addresses (behind an Ethernet header and
// VLAN tags, or raw IP).
func addresses(b []byte, linkType uint32) (src, dst netip.Addr, ok bool) {
	if linkType != 101 {
		if len(b) < 14 {
			return
		}
		et, off := uint16(b[12])<<8|uint16(b[13]), 14
		for (et == 0x8100 || et == 0x88a8) && len(b) >= off+4 {
			et, off = uint16(b[off+2])<<8|uint16(b[off+3]), off+4
		}
		if et != 0x0800 && et != 0x86dd {
			return
		}
		b = b[off:]
	}
	switch {
	case len(b) >= 20 && b[0]>>4 == 4:
		return netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20])), true
	case len(b) >= 40 && b[0]>>4 == 6:
		return netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40])), true
	}
	return
}

// plan is a request resolved: the filter the agents apply and the agents
// that apply it.
type plan struct {
	filter *flowv1.CaptureFilter
	agents []*agent
	// missing are nodes asked for (or holding matching pods) without an
	// agent that can capture, and why.
	missing map[string]string
	// resolved is how many addresses the names resolved to.
	resolved int
}

// resolve checks req and decides who captures what.
func (s *Service) resolve(req *flowv1.CaptureRequest) (*plan, error) {
	f := &flowv1.CaptureFilter{}
	if req.GetFilter() != nil {
		f = cloneFilter(req.GetFilter())
	}
	for _, l := range [][]string{f.Ip, f.FromIp, f.ToIp, f.PeerIp} {
		if _, err := flowquery.ParsePrefixes(l); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "capture: %v", err)
		}
	}
	for _, l := range [][]uint32{f.Port, f.FromPort, f.ToPort} {
		for _, p := range l {
			if p > 65535 {
				return nil, status.Errorf(codes.InvalidArgument, "capture: port %d: must be at most 65535", p)
			}
		}
	}
	for _, p := range f.Protocol {
		if p > 255 {
			return nil, status.Errorf(codes.InvalidArgument, "capture: protocol %d: must be at most 255", p)
		}
	}
	p := &plan{filter: f, missing: map[string]string{}}
	// nodes: the nodes that can see matching packets; nil: any.
	var nodes map[string]bool
	if len(req.Namespace)+len(req.Pod)+len(req.Workload) > 0 {
		if len(f.Ip) > 0 {
			return nil, status.Error(codes.InvalidArgument, "capture: --ip with --namespace/--pod/--workload: the names resolve to addresses of either end too; give --peer-ip (packets between the names and these), --from-ip/--to-ip, or one of them")
		}
		if s.opts.Lister == nil {
			return nil, status.Error(codes.FailedPrecondition, "capture: this collector has no Kubernetes metadata to resolve --namespace/--pod/--workload with; give addresses (--ip)")
		}
		q, err := flowquery.Compile([]*flowv1.FlowFilter{{Namespace: req.Namespace, Pod: req.Pod, Workload: req.Workload}})
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "capture: %v", err)
		}
		nodes = map[string]bool{}
		anywhere := false
		for _, e := range s.opts.Lister.Endpoints() {
			if !q.Match(&enriched.Flow{Enriched: true, Src: e.Meta}) {
				continue
			}
			bits := 32
			if e.Addr.Is6() {
				bits = 128
			}
			f.Ip = append(f.Ip, netip.PrefixFrom(e.Addr, bits).String())
			p.resolved++
			if e.Meta.Kind == enriched.KindPod && e.Meta.Node != "" {
				nodes[e.Meta.Node] = true
			} else {
				anywhere = true // a Service address: its clients are anywhere
			}
		}
		if p.resolved == 0 {
			return nil, status.Errorf(codes.NotFound, "capture: no running pod or Service matches %s", names(req))
		}
		slices.Sort(f.Ip)
		f.Ip = slices.Compact(f.Ip)
		if anywhere {
			nodes = nil
		}
	}
	if len(req.Node) > 0 {
		asked := map[string]bool{}
		for _, n := range req.Node {
			if nodes == nil || nodes[n] {
				asked[n] = true
			}
		}
		if len(asked) == 0 {
			return nil, status.Errorf(codes.NotFound, "capture: none of the nodes %s holds a pod matching %s", strings.Join(req.Node, ", "), names(req))
		}
		nodes = asked
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, a := range s.agents {
		if nodes != nil && !nodes[n] {
			continue
		}
		if !a.enabled {
			p.missing[n] = "capture is disabled on this node's agent (--capture=false; the operator's spec.agent.capture.enable)"
			continue
		}
		p.agents = append(p.agents, a)
	}
	for n := range nodes {
		if _, ok := s.agents[n]; !ok {
			p.missing[n] = "no agent of this node is connected to this collector"
		}
	}
	sort.Slice(p.agents, func(i, j int) bool { return p.agents[i].node < p.agents[j].node })
	return p, nil
}

func names(req *flowv1.CaptureRequest) string {
	var parts []string
	for _, x := range []struct {
		flag string
		v    []string
	}{{"--namespace", req.Namespace}, {"--pod", req.Pod}, {"--workload", req.Workload}} {
		if len(x.v) > 0 {
			parts = append(parts, x.flag+" "+strings.Join(x.v, ","))
		}
	}
	return strings.Join(parts, " ")
}

func cloneFilter(f *flowv1.CaptureFilter) *flowv1.CaptureFilter {
	return &flowv1.CaptureFilter{Ip: slices.Clone(f.Ip), FromIp: slices.Clone(f.FromIp), ToIp: slices.Clone(f.ToIp), PeerIp: slices.Clone(f.PeerIp),
		Port: slices.Clone(f.Port), FromPort: slices.Clone(f.FromPort), ToPort: slices.Clone(f.ToPort),
		Protocol: slices.Clone(f.Protocol), TcpFlags: slices.Clone(f.TcpFlags), Direction: f.Direction,
		Interface: slices.Clone(f.Interface)}
}

// Capture runs one capture for a caller.
func (s *Service) Capture(req *flowv1.CaptureRequest, stream grpc.ServerStreamingServer[flowv1.CaptureResponse]) error {
	ctx := stream.Context()
	dur := DefaultDuration
	if d := req.GetDuration(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 {
			return status.Error(codes.InvalidArgument, "capture: duration must be positive")
		}
		dur = d.AsDuration()
	}
	if dur > MaxDuration {
		return status.Errorf(codes.InvalidArgument, "capture: duration %s: at most %s", dur, MaxDuration)
	}
	maxBytes := req.GetMaxBytes()
	if maxBytes == 0 {
		maxBytes = DefaultMaxBytes
	}
	p, err := s.resolve(req)
	if err != nil {
		return err
	}
	user := ""
	if s.opts.User != nil {
		user = s.opts.User(ctx)
	}
	if user == "" {
		user = "(unauthenticated: --auth none)"
	}
	c := &capture{id: s.nextID.Add(1), packets: make(chan *flowv1.CapturedPacket, packetBuffer),
		ends: make(chan *flowv1.NodeCaptureEnd, len(p.agents)+1)}
	nodes := make([]string, 0, len(p.agents))
	for _, a := range p.agents {
		nodes = append(nodes, a.node)
	}
	// Every capture is logged: who, what, where, bounds.
	s.log.Info("capture", "id", c.id, "user", user, "filter", filterText(p.filter), "namespace", req.Namespace, "pod", req.Pod,
		"workload", req.Workload, "node", req.Node, "nodes", nodes, "duration", dur, "max_packets", req.GetMaxPackets(),
		"max_bytes", maxBytes, "snaplen", req.GetSnaplen())
	s.running.Add(1)
	defer s.running.Add(-1)

	start := &flowv1.CaptureCommand{Command: &flowv1.CaptureCommand_Start{Start: &flowv1.CaptureStart{CaptureId: c.id, Filter: p.filter,
		Duration: durationpb.New(dur), MaxPackets: req.GetMaxPackets(), MaxBytes: maxBytes, Snaplen: req.GetSnaplen()}}}
	pending := map[string]*agent{}
	for _, a := range p.agents {
		a.mu.Lock()
		a.sessions[c.id] = &session{c: c, node: a.node}
		a.mu.Unlock()
		select {
		case a.send <- start:
			pending[a.node] = a
		case <-a.done:
			a.forget(c.id)
			p.missing[a.node] = "the agent's capture stream ended"
		default:
			a.forget(c.id)
			p.missing[a.node] = "the agent's capture stream is congested"
		}
	}
	end := &flowv1.CaptureEnd{NotCaptured: map[string]uint64{}}
	cancelAll := func() {
		for _, a := range pending {
			select {
			case a.send <- &flowv1.CaptureCommand{Command: &flowv1.CaptureCommand_Cancel{Cancel: c.id}}:
			case <-a.done:
			default:
				// The command queue is full: the agent is stuck; its
				// own duration bound ends the capture.
			}
		}
	}
	reason := ""
	deadline := time.NewTimer(dur + endGrace)
	defer deadline.Stop()
	var graceTimer <-chan time.Time
	finish := func(why string) {
		if reason == "" {
			reason = why
			cancelAll()
			graceTimer = time.After(endGrace)
		}
	}
	if len(pending) == 0 {
		reason = "no_agent"
	}
	for len(pending) > 0 {
		select {
		case <-ctx.Done():
			// The caller went away: nothing to tell it.
			cancelAll()
			for _, a := range pending {
				a.forget(c.id)
			}
			s.log.Info("capture ended", "id", c.id, "user", user, "reason", "canceled", "packets", end.Packets)
			return ctx.Err()
		case pk := <-c.packets:
			c.took(pk)
			if reason != "" {
				continue // past the capture's bounds
			}
			if err := stream.Send(&flowv1.CaptureResponse{Response: &flowv1.CaptureResponse_Packet{Packet: pk}}); err != nil {
				cancelAll()
				for _, a := range pending {
					a.forget(c.id)
				}
				return err
			}
			end.Packets++
			end.Bytes += uint64(len(pk.Data))
			s.packets.Inc()
			switch {
			case req.GetMaxPackets() > 0 && end.Packets >= req.GetMaxPackets():
				finish("max_packets")
			case end.Bytes >= maxBytes:
				finish("max_bytes")
			}
		case ne := <-c.ends:
			delete(pending, ne.Node)
			end.Nodes = append(end.Nodes, ne)
			for r, n := range ne.NotCaptured {
				end.NotCaptured[r] += n
				s.lost.WithLabelValues(r).Add(float64(n))
			}
		case <-deadline.C:
			finish("duration")
		case <-graceTimer:
			for n, a := range pending {
				a.forget(c.id)
				end.Nodes = append(end.Nodes, &flowv1.NodeCaptureEnd{Node: n, Reason: "canceled", Error: "no end report from the agent"})
			}
			pending = nil
		}
	}
	// Packets still buffered: deliver them unless past the bounds.
	for more := reason == ""; more; {
		select {
		case pk := <-c.packets:
			c.took(pk)
			if (req.GetMaxPackets() > 0 && end.Packets >= req.GetMaxPackets()) || end.Bytes >= maxBytes {
				more = false
				break
			}
			if err := stream.Send(&flowv1.CaptureResponse{Response: &flowv1.CaptureResponse_Packet{Packet: pk}}); err != nil {
				return err
			}
			end.Packets++
			end.Bytes += uint64(len(pk.Data))
			s.packets.Inc()
		default:
			more = false
		}
	}
	if n := c.relay.Load(); n > 0 {
		end.NotCaptured["relay"] += n
		s.lost.WithLabelValues("relay").Add(float64(n))
	}
	if reason == "" {
		reason = agentReason(end.Nodes)
	}
	end.Reason = reason
	for n, why := range p.missing {
		end.Nodes = append(end.Nodes, &flowv1.NodeCaptureEnd{Node: n, Error: why})
	}
	sort.Slice(end.Nodes, func(i, j int) bool { return end.Nodes[i].Node < end.Nodes[j].Node })
	s.log.Info("capture ended", "id", c.id, "user", user, "reason", reason, "packets", end.Packets, "bytes", end.Bytes,
		"not_captured", end.NotCaptured)
	return stream.Send(&flowv1.CaptureResponse{Response: &flowv1.CaptureResponse_End{End: end}})
}

// agentReason is the capture's end reason when every agent ended on its
// own: theirs when they agree (each applies the bounds), else duration.
func agentReason(nodes []*flowv1.NodeCaptureEnd) string {
	r := ""
	for _, n := range nodes {
		if n.Error != "" {
			continue
		}
		if r == "" {
			r = n.Reason
		} else if r != n.Reason {
			return "duration"
		}
	}
	if r == "" {
		return "no_agent"
	}
	return r
}

// forget drops a capture from the agent (no more packets routed to it).
func (a *agent) forget(id uint64) {
	a.mu.Lock()
	delete(a.sessions, id)
	a.mu.Unlock()
}

// filterText is the filter for the log line.
func filterText(f *flowv1.CaptureFilter) string {
	var b strings.Builder
	add := func(name string, v any, n int) {
		if n > 0 {
			fmt.Fprintf(&b, "%s=%v ", name, v)
		}
	}
	add("ip", f.Ip, len(f.Ip))
	add("from_ip", f.FromIp, len(f.FromIp))
	add("to_ip", f.ToIp, len(f.ToIp))
	add("peer_ip", f.PeerIp, len(f.PeerIp))
	add("port", f.Port, len(f.Port))
	add("from_port", f.FromPort, len(f.FromPort))
	add("to_port", f.ToPort, len(f.ToPort))
	add("protocol", f.Protocol, len(f.Protocol))
	add("tcp_flags", f.TcpFlags, len(f.TcpFlags))
	add("interface", f.Interface, len(f.Interface))
	switch f.Direction {
	case flowv1.CaptureDirection_CAPTURE_DIRECTION_INGRESS:
		add("direction", "ingress", 1)
	case flowv1.CaptureDirection_CAPTURE_DIRECTION_EGRESS:
		add("direction", "egress", 1)
	}
	return strings.TrimSpace(b.String())
}

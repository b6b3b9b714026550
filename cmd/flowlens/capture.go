package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/client-go/rest"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"github.com/flowlens/flowlens/internal/shared/textfmt"
	"github.com/flowlens/flowlens/internal/shared/version"
)

// captureOptions are capture's own settings (the rest, the collectors and
// the filter flags, are observe's, in options).
type captureOptions struct {
	duration   time.Duration
	maxPackets uint64
	maxBytes   uint64
	snaplen    uint32
	write      string // -w: a file, "-" for stdout, "" with -o json
	direction  flowv1.CaptureDirection
	interfaces []string
	peers      []string // --peer-ip
}

// The capture defaults the collector applies too (capturerelay, which
// flowlens may not link): the flags' help states them.
const (
	defaultCaptureDuration = 30 * time.Second
	defaultCaptureMaxBytes = 50 << 20
)

// captureRows are capture's options: the collectors' and the filter rows
// of observe (copies: the same options, written once), and capture's own.
var captureRows = slices.Concat(
	cliconf.InSection("Collectors", []*cliconf.Option[options]{observeRow("server"), observeRow("kubeconfig"), observeRow("context"),
		observeRow("collector-namespace")}, settings(collectorTLS.Options()), []*cliconf.Option[options]{
		setting(&cliconf.Option[options]{Name: "token", Arg: "token", Usage: "bearer token for collectors that authorize callers (--auth kubernetes: its user needs " +
			kubeauth.PermissionOn(kubeauth.SubresourceCapture, kubeauth.VerbCapture) + ", ClusterRole " + kubeauth.CaptureClusterRole + "), sent only over TLS (default: the kubeconfig's); better set in FLOWLENS_CAPTURE_TOKEN",
			Set: func(o *options, v string) error { o.token = v; return nil }}),
		observeRow("tls-server-name")}),
	cliconf.InSection("Output", []*cliconf.Option[options]{
		setting(&cliconf.Option[options]{Name: "write", Short: "w", Arg: "file", Usage: "write the packets as pcapng to this file, - for stdout (to pipe into tshark or Wireshark)",
			Set: func(o *options, v string) error { o.capture.write = v; return nil }}),
		setting(&cliconf.Option[options]{Name: "output", Short: "o", Arg: "format", Default: "pcapng", Usage: "pcapng (to --write), or json: one line per packet's summary on stdout",
			Set: func(o *options, v string) error {
				switch v {
				case "pcapng", "json":
					o.output = v
					return nil
				}
				return errors.New("must be pcapng or json")
			}}),
	}),
	cliconf.InSection("Bounds", []*cliconf.Option[options]{
		setting(&cliconf.Option[options]{Name: "duration", Arg: "duration", Default: defaultCaptureDuration.String(), Usage: "capture for this long at most",
			Set: func(o *options, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return errors.New("must be a positive duration such as 30s or 2m")
				}
				o.capture.duration = d
				return nil
			}}),
		setting(&cliconf.Option[options]{Name: "max-packets", Arg: "N", Default: "0", Usage: "stop after N packets (0: no bound)",
			Set: func(o *options, v string) (err error) {
				if o.capture.maxPackets, err = strconv.ParseUint(v, 10, 64); err != nil {
					return errors.New("must be a number of packets (0: no bound)")
				}
				return nil
			}}),
		setting(&cliconf.Option[options]{Name: "max-bytes", Arg: "bytes", Default: strconv.Itoa(defaultCaptureMaxBytes), Usage: "stop after this many captured bytes",
			Set: func(o *options, v string) (err error) {
				if o.capture.maxBytes, err = strconv.ParseUint(v, 10, 64); err != nil || o.capture.maxBytes == 0 {
					return errors.New("must be a positive number of bytes")
				}
				return nil
			}}),
		setting(&cliconf.Option[options]{Name: "snaplen", Arg: "bytes", Default: "0", Usage: "bytes copied per packet (0: the agents' --capture-max-snaplen, 128 by default; more is clamped to it)",
			Set: func(o *options, v string) error {
				n, err := strconv.ParseUint(v, 10, 32)
				if err != nil || n > 262144 {
					return errors.New("must be a number of bytes from 0 to 262144")
				}
				o.capture.snaplen = uint32(n)
				return nil
			}}),
	}),
	cliconf.InSection("Filters", []*cliconf.Option[options]{
		observeRow("namespace"), observeRow("pod"), observeRow("workload"), observeRow("node"),
		observeRow("ip"), observeRow("from-ip"), observeRow("to-ip"),
		{Name: "peer-ip", Arg: "list", Usage: "the other end in one of these CIDRs or addresses: with --ip (or --namespace/--pod/--workload), packets between those and these, both directions; alone, like --ip",
			SetList: func(o *options, v []string) error {
				ff := &flowv1.FlowFilter{}
				if err := cidrs(func(ff *flowv1.FlowFilter) *[]string { return &ff.Ip })(ff, v); err != nil {
					return err
				}
				o.capture.peers = append(o.capture.peers, ff.Ip...)
				return nil
			}},
		observeRow("port"), observeRow("from-port"), observeRow("to-port"),
		observeRow("protocol"), observeRow("tcp-flags"),
		setting(&cliconf.Option[options]{Name: "direction", Arg: "dir", Usage: "ingress or egress: packets seen by that hook only (default: both)",
			Set: func(o *options, v string) error {
				switch v {
				case "ingress":
					o.capture.direction = flowv1.CaptureDirection_CAPTURE_DIRECTION_INGRESS
				case "egress":
					o.capture.direction = flowv1.CaptureDirection_CAPTURE_DIRECTION_EGRESS
				case "", "any":
					o.capture.direction = flowv1.CaptureDirection_CAPTURE_DIRECTION_ANY
				default:
					return errors.New("must be ingress or egress")
				}
				return nil
			}}),
		{Name: "interface", Arg: "list", Usage: "only on these interfaces (names, as in flow records)",
			SetList: func(o *options, v []string) error {
				o.capture.interfaces = append(o.capture.interfaces, v...)
				return nil
			}},
	}),
)

// captureSpec is flowlens capture's configuration (docs/capture.md).
var captureSpec = &cliconf.Spec[options]{
	Program: "flowlens capture",
	Summary: "Captures packets on the nodes, through the collectors, and writes them as pcapng (each node's interface its own " +
		"interface block, each packet's comment its Kubernetes context). Filters combine with AND across flags and OR within one. " +
		"Needs " + kubeauth.PermissionOn(kubeauth.SubresourceCapture, kubeauth.VerbCapture) + ". See docs/capture.md.",
	EnvPrefix: "FLOWLENS_CAPTURE_",
	Options:   captureRows,
	Init:      func(o *options, _ func(string) string) { o.defaulted = true },
	Validate:  func(o *options) error { return o.validateCapture() },
}

func (o *options) validateCapture() error {
	errs := []error{collectorTLS.Check(o), cliconf.CheckFile("--kubeconfig", o.kubeconfig)}
	if len(o.servers) > 0 && (o.kubeconfig != "" || o.kubeCtx != "") {
		errs = append(errs, errors.New("--server and --kubeconfig/--context: choose one"))
	}
	switch {
	case o.output == "json" && o.capture.write != "":
		errs = append(errs, errors.New("--write and --output json: choose one"))
	case o.output == "pcapng" && o.capture.write == "":
		errs = append(errs, errors.New("--write is needed: a file, or - for stdout (flowlens capture -w - | tshark -r -), or --output json"))
	}
	if len(o.capture.interfaces) > 0 {
		for _, s := range o.capture.interfaces {
			if s == "" || len(s) > 15 {
				errs = append(errs, fmt.Errorf("--interface %q: must be an interface name", s))
			}
		}
	}
	return errors.Join(errs...)
}

// captureRequest is o's CaptureRequest.
func (o *options) captureRequest() *flowv1.CaptureRequest {
	ff := o.pos
	if ff == nil {
		ff = &flowv1.FlowFilter{}
	}
	return &flowv1.CaptureRequest{
		Filter: &flowv1.CaptureFilter{Ip: ff.Ip, FromIp: ff.FromIp, ToIp: ff.ToIp, PeerIp: o.capture.peers, Port: ff.Port, FromPort: ff.FromPort, ToPort: ff.ToPort,
			Protocol: ff.Protocol, TcpFlags: ff.TcpFlags, Direction: o.capture.direction, Interface: o.capture.interfaces},
		Namespace: ff.Namespace, Pod: ff.Pod, Workload: ff.Workload, Node: ff.Node,
		Duration: durationpb.New(o.capture.duration), MaxPackets: o.capture.maxPackets, MaxBytes: o.capture.maxBytes,
		Snaplen: o.capture.snaplen,
	}
}

// captureCmd is the capture subcommand. It returns the exit code.
func captureCmd(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	o, code, done := loadOptions(captureSpec, "capture", args, env, stdout, stderr)
	if done {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "flowlens capture: %s\n", textfmt.Safe(err.Error()))
		return 1
	}
	servers, serverName := o.servers, o.serverName
	var kube *rest.Config
	var pods map[string]string
	if len(servers) == 0 {
		fwd, err := forwardCollectors(ctx, o, grpcPort, stderr)
		if err != nil {
			return fail(err)
		}
		defer fwd.close()
		servers, kube, pods = fwd.addrs, fwd.kube, fwd.pods
		if serverName == "" {
			serverName = "flowlens-collector." + o.namespace + ".svc"
		}
	}
	conn, err := connect(ctx, o, serverName, kube)
	if err != nil {
		return fail(err)
	}
	conn.names = pods
	// Open the output before asking: a file that cannot be written fails
	// now, not after the capture.
	var out io.Writer = stdout
	if w := o.capture.write; w != "" && w != "-" {
		f, err := os.Create(w)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		out = f
	}
	// Interrupted (Ctrl-C), the capture ends on the agents and what came
	// is written, as tcpdump does. Packets are written as they come,
	// merged in time order within a window (reorder.go).
	sink, err := newCaptureSink(out, o.output, o.capture.maxPackets)
	if err != nil {
		return fail(err)
	}
	res, err := runCapture(ctx, o.captureRequest(), servers, conn, sink)
	if err != nil {
		return fail(err)
	}
	if f, ok := out.(*os.File); ok && f != os.Stdout {
		if err := f.Close(); err != nil {
			return fail(err)
		}
	}
	res.report(stderr)
	if res.noneCaptured() {
		return exitNoCapture
	}
	return 0
}

// exitNoCapture is the exit status when no agent could capture: every
// node asked refused, or none was connected, or none matched
// (docs/capture.md).
const exitNoCapture = 3

// captured is what the collectors answered, merged.
type captured struct {
	written uint64 // packets written
	late    uint64 // of them, written out of time order (past the window)
	ends    []*flowv1.CaptureEnd
	bound   uint64 // packets dropped here: past --max-packets of all collectors together
	snaplen uint32 // asked
	// noAgents are the collectors that had no agent to ask at all.
	noAgents []string
	// interrupted: the caller's context ended first (Ctrl-C).
	interrupted bool
}

// captureItem is what a collector's stream gave: a packet or its end.
type captureItem struct {
	p    *flowv1.CapturedPacket
	end  *flowv1.CaptureEnd
	from string
}

// runCapture asks every collector and writes their packets to sink as
// they come, merged in time order within the reorder window, and
// gathers their end reports.
func runCapture(ctx context.Context, req *flowv1.CaptureRequest, servers []string, c *connection, sink *captureSink) (*captured, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parent := ctx
	res := &captured{snaplen: req.Snaplen}
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	in := make(chan captureItem, 1024)
	for i, s := range servers {
		conn, err := grpc.NewClient(s, append(c.opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))...)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", s, err)
		}
		defer conn.Close()
		name := s
		if n, ok := c.names[s]; ok {
			name = n
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := flowv1.NewPacketCaptureClient(conn).Capture(ctx, req)
			for err == nil {
				var r *flowv1.CaptureResponse
				if r, err = st.Recv(); err != nil {
					break
				}
				it := captureItem{p: r.GetPacket(), end: r.GetEnd(), from: name}
				if it.p == nil && it.end == nil {
					continue
				}
				select {
				case in <- it:
				case <-ctx.Done():
				}
			}
			switch {
			case errors.Is(err, io.EOF):
			case parent.Err() != nil && status.Code(err) == codes.Canceled:
				// Interrupted: what came so far is the capture.
			default:
				errs[i] = fmt.Errorf("%s: %w", name, explainCapture(c, err))
			}
		}()
	}
	go func() {
		wg.Wait()
		close(in)
	}()
	ro := newReorder(reorderWindow, reorderMaxHeld)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var werr error
	wrote := false
	for open := true; open; {
		var due <-chan time.Time
		if t, ok := ro.next(); ok {
			timer.Reset(time.Until(t))
			due = timer.C
		}
		select {
		case it, ok := <-in:
			switch {
			case !ok:
				open = false
			case it.p != nil:
				ro.push(it.p, time.Now())
			default:
				res.ends = append(res.ends, it.end)
				if len(it.end.Nodes) == 0 {
					res.noAgents = append(res.noAgents, it.from)
				}
			}
		case <-due:
		}
		if werr != nil {
			continue // draining the streams after a write error
		}
		n := sink.written
		werr = ro.due(time.Now(), sink.packet)
		wrote = wrote || sink.written != n
		// Flushed when nothing more is waiting: a reader of a pipe sees
		// each packet about the window after it came, and a busy
		// capture is written in large writes.
		if werr == nil && wrote && len(in) == 0 {
			werr, wrote = sink.flush(), false
		}
		if werr != nil {
			cancel() // the output is gone: end the capture on the agents
		}
	}
	if werr == nil {
		werr = ro.drain(sink.packet)
	}
	if werr == nil {
		werr = sink.flush()
	}
	if werr != nil {
		return nil, werr
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	res.interrupted = parent.Err() != nil
	res.written, res.bound, res.late = sink.written, sink.bound, ro.late
	return res, nil
}

// noneCaptured says that no agent could capture: no node of any
// collector ran the capture (each refused, or was not connected, or none
// matched). An interrupted capture is not that.
func (r *captured) noneCaptured() bool {
	if r.interrupted {
		return false
	}
	for _, e := range r.ends {
		for _, n := range e.Nodes {
			if n.Error == "" {
				return false
			}
		}
	}
	return true
}

// explainCapture is connection.explain for capture's permission.
func explainCapture(c *connection, err error) error {
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	perm := kubeauth.PermissionOn(kubeauth.SubresourceCapture, kubeauth.VerbCapture)
	switch s.Code() {
	case codes.PermissionDenied:
		return errors.New(s.Message())
	case codes.Unauthenticated:
		msg := s.Message()
		if !c.token {
			msg = fmt.Sprintf("%s: %s. The collector authorizes captures by bearer token (%s): give one with --token for a user or ServiceAccount bound to the ClusterRole %s",
				msg, c.noToken, perm, kubeauth.CaptureClusterRole)
		}
		return errors.New(msg)
	case codes.Unimplemented:
		return errors.New("this collector serves no packet capture (a version before it): upgrade it")
	}
	return errors.New(s.Message())
}

// report prints the end on stderr: what was captured, what was not and
// why, the nodes that could not capture.
func (r *captured) report(w io.Writer) {
	notCaptured := map[string]uint64{}
	var reasons []string
	for _, e := range r.ends {
		for k, v := range e.NotCaptured {
			notCaptured[k] += v
		}
		if e.Reason != "" && !slices.Contains(reasons, e.Reason) {
			reasons = append(reasons, e.Reason)
		}
	}
	if len(reasons) > 1 {
		reasons = slices.DeleteFunc(reasons, func(x string) bool { return x == "no_agent" })
	}
	if r.bound > 0 {
		reasons = []string{"max_packets"}
	}
	if r.interrupted {
		reasons = append(slices.DeleteFunc(reasons, func(x string) bool { return x == "canceled" }), "interrupted")
	}
	fmt.Fprintf(w, "%d packets captured\n", r.written)
	if r.late > 0 {
		fmt.Fprintf(w, "%d packets written out of time order (they arrived more than %s after a later one)\n", r.late, reorderWindow)
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range notCaptured {
			if !yield(k) {
				return
			}
		}
	}) {
		if n := notCaptured[k]; n > 0 {
			fmt.Fprintf(w, "%d packets not captured: %s\n", n, notCapturedText(k))
		}
	}
	fmt.Fprintf(w, "capture ended: %s\n", endText(reasons))
	// With several collectors, each agent is connected to one: a node
	// another collector captured on is not missing.
	captured := map[string]bool{}
	for _, e := range r.ends {
		for _, n := range e.Nodes {
			if n.Error == "" {
				captured[n.Node] = true
			}
		}
	}
	// Once per node (each collector reports a node none has), in node
	// order, whatever order the collectors ended in.
	missing := map[string]string{}
	for _, e := range r.ends {
		for _, n := range e.Nodes {
			if _, ok := missing[n.Node]; n.Error != "" && !captured[n.Node] && !ok {
				missing[n.Node] = n.Error
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(missing)) {
		fmt.Fprintf(w, "node %s: %s\n", textfmt.Safe(n), textfmt.Safe(missing[n]))
	}
	// A collector without any agent to ask (none connected to it): said
	// when no other collector captured.
	if len(captured) == 0 {
		for _, c := range r.noAgents {
			fmt.Fprintf(w, "collector %s: no agent is connected to it\n", textfmt.Safe(c))
		}
	}
	// A snaplen the agents clamped (--capture-max-snaplen) is said, not
	// hidden: the user asked for more bytes than the packets hold.
	clamped := map[string]uint32{}
	for _, e := range r.ends {
		for _, n := range e.Nodes {
			if n.Error == "" && n.Snaplen > 0 && r.snaplen > n.Snaplen {
				clamped[n.Node] = n.Snaplen
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(clamped)) {
		fmt.Fprintf(w, "node %s: snaplen clamped to %d bytes (its agent's --capture-max-snaplen)\n", textfmt.Safe(n), clamped[n])
	}
}

func notCapturedText(reason string) string {
	switch reason {
	case "ring_full":
		return "ring full (the kernel ring could not take them)"
	case "consumer":
		return "consumer (the agent could not send them fast enough)"
	case "relay":
		return "relay (the collector could not pass them on fast enough)"
	}
	return reason
}

func endText(reasons []string) string {
	if len(reasons) == 0 {
		return "no collector answered"
	}
	var out []string
	for _, r := range reasons {
		switch r {
		case "max_packets":
			out = append(out, "--max-packets reached")
		case "max_bytes":
			out = append(out, "--max-bytes reached")
		case "duration":
			out = append(out, "--duration passed")
		case "interrupted":
			out = append(out, "interrupted")
		case "no_agent":
			out = append(out, "no agent of a matching node could capture")
		default:
			out = append(out, r)
		}
	}
	return strings.Join(out, "; ")
}

// captureSink writes packets in the output format, bounded by
// --max-packets over every collector (each collector bounds only its own).
type captureSink struct {
	pw         *pcapngWriter // pcapng
	bw         *bufio.Writer // json
	maxPackets uint64
	written    uint64
	bound      uint64 // packets past maxPackets, not written
}

func newCaptureSink(w io.Writer, format string, maxPackets uint64) (*captureSink, error) {
	s := &captureSink{maxPackets: maxPackets}
	if format == "json" {
		s.bw = bufio.NewWriter(w)
		return s, nil
	}
	pw, err := newPcapngWriter(w, version.String("flowlens capture"))
	s.pw = pw
	return s, err
}

// packet writes p (or counts it past --max-packets).
func (s *captureSink) packet(p *flowv1.CapturedPacket) error {
	if s.maxPackets > 0 && s.written >= s.maxPackets {
		s.bound++
		return nil
	}
	s.written++
	if s.bw != nil {
		b, err := json.Marshal(summary(p))
		if err != nil {
			return err
		}
		s.bw.Write(textfmt.SafeJSON(nil, b))
		return s.bw.WriteByte('\n')
	}
	lt := uint16(p.LinkType)
	if lt == 0 {
		lt = 1
	}
	ifc := pcapIface{name: p.Interface, linkType: lt, snaplen: 0,
		description: fmt.Sprintf("node=%s netns=%s ifindex=%d direction=%s", p.Node, p.Netns, p.Ifindex, directionName(p.Direction))}
	return s.pw.packet(ifc, p.TimeUnixNano, p.WireLength, p.Data, comment(p))
}

func (s *captureSink) flush() error {
	if s.bw != nil {
		return s.bw.Flush()
	}
	return s.pw.flush()
}

func directionName(d flowv1.CaptureDirection) string {
	switch d {
	case flowv1.CaptureDirection_CAPTURE_DIRECTION_INGRESS:
		return "ingress"
	case flowv1.CaptureDirection_CAPTURE_DIRECTION_EGRESS:
		return "egress"
	}
	return "any"
}

// comment is a packet's pcapng comment: its node and the Kubernetes
// context of both ends.
func comment(p *flowv1.CapturedPacket) string {
	return "node=" + p.Node + " src=" + k8sText(p.SrcK8S) + " dst=" + k8sText(p.DstK8S)
}

// k8sText is an end's context: kind:namespace/name(workload kind/name).
func k8sText(k *flowv1.K8SContext) string {
	if k == nil || k.Kind == "" {
		return "-"
	}
	s := k.Kind + ":"
	if k.Namespace != "" {
		s += k.Namespace + "/"
	}
	s += k.Name
	if k.Workload != "" && (k.Workload != k.Name || k.WorkloadKind != "Pod") {
		s += "(" + k.WorkloadKind + "/" + k.Workload + ")"
	}
	return s
}

// packetSummary is -o json's line.
type packetSummary struct {
	Time           time.Time          `json:"time"`
	Node           string             `json:"node"`
	Interface      string             `json:"interface"`
	Netns          string             `json:"netns,omitempty"`
	Direction      string             `json:"direction"`
	WireLength     uint32             `json:"wire_length"`
	CapturedLength int                `json:"captured_length"`
	Protocol       string             `json:"protocol,omitempty"`
	Src            string             `json:"src,omitempty"`
	Dst            string             `json:"dst,omitempty"`
	SrcK8s         *flowv1.K8SContext `json:"src_k8s,omitempty"`
	DstK8s         *flowv1.K8SContext `json:"dst_k8s,omitempty"`
}

func summary(p *flowv1.CapturedPacket) packetSummary {
	s := packetSummary{Time: time.Unix(0, p.TimeUnixNano).UTC(), Node: p.Node, Interface: p.Interface, Netns: p.Netns,
		Direction: directionName(p.Direction), WireLength: p.WireLength, CapturedLength: len(p.Data), SrcK8s: p.SrcK8S, DstK8s: p.DstK8S}
	if src, dst, proto, ok := ends(p.Data, p.LinkType); ok {
		s.Protocol, s.Src, s.Dst = textfmt.ProtoName(proto), src.String(), dst.String()
	}
	return s
}

// ends reads a packet's addresses, ports and protocol (behind an Ethernet
// header and VLAN tags, or raw IP).
func ends(b []byte, linkType uint32) (src, dst netip.AddrPort, proto uint8, ok bool) {
	if linkType != 101 {
		if len(b) < 14 {
			return
		}
		et, off := binary.BigEndian.Uint16(b[12:]), 14
		for (et == 0x8100 || et == 0x88a8) && len(b) >= off+4 {
			et, off = binary.BigEndian.Uint16(b[off+2:]), off+4
		}
		if et != 0x0800 && et != 0x86dd {
			return
		}
		b = b[off:]
	}
	var sa, da netip.Addr
	var l4 []byte
	switch {
	case len(b) >= 20 && b[0]>>4 == 4:
		sa, da, proto = netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20])), b[9]
		if ihl := int(b[0]&0xf) * 4; ihl >= 20 && len(b) >= ihl {
			l4 = b[ihl:]
		}
	case len(b) >= 40 && b[0]>>4 == 6:
		sa, da, proto = netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40])), b[6]
		l4 = b[40:]
	default:
		return
	}
	var sp, dp uint16
	if (proto == 6 || proto == 17 || proto == 132) && len(l4) >= 4 {
		sp, dp = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
	}
	return netip.AddrPortFrom(sa, sp), netip.AddrPortFrom(da, dp), proto, true
}

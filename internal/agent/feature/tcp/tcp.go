// Package tcp is the "tcp" feature: TCP connection health per flow, what
// the flow's source did in the period: its role (client, server), the
// connects it started and how they ended (refused, timed out), the SYNs
// and SYN-ACKs it sent again, its resets and zero windows, and its
// connects' handshake latency (SYN to SYN-ACK). Kernel side: bpf/tcp.h,
// inside the TC programs (SYN, RST, FIN and zero-window segments only),
// and tp_btf/inet_sock_set_state for the clients that give up.
// docs/tcp.md.
package tcp

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/datapath/batchread"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The kernel's roles are pkg/flow's.
var (
	_ = [1]struct{}{}[datapath.TCPRoleClient-uint8(flow.TCPRoleClient)]
	_ = [1]struct{}{}[datapath.TCPRoleServer-uint8(flow.TCPRoleServer)]
)

// Connections bounds the TCP connections the kernel remembers at once, per
// node (map tcp_conns, an LRU: 64 bytes each, about 6 MiB): beyond it the
// least recently seen is forgotten, and its flows lose their role in the
// periods after (and a pending connect of it its timeout).
const Connections = 65536

// zeroWindowFlows bounds the flows whose last zero-window acknowledgement
// is remembered (map tcp_zwin, an LRU): only flows that advertised a zero
// window are there.
const zeroWindowFlows = 16384

// giveUp is how long a pending connect's SYNs must have stopped before
// Sweep reports it abandoned, for a client whose socket is not on the node
// (forwarded traffic; a local client's socket reports itself, bpf/tcp.h):
// longer than the longest gap between two SYNs of a client still trying
// (TCP_RTO_MAX, 120 s), so that one is never reported early.
var giveUp = 130 * time.Second

// sweepEvery is how often, at most, Sweep reads tcp_conns (every entry):
// the timeouts it reports are late by up to this much, against giveUp.
var sweepEvery = 10 * time.Second

// Feature records TCP connection health.
type Feature struct {
	feature.NoOptions
	reader    *batchread.Reader[datapath.FlowKey, datapath.TCPConn]
	abandoned []conn        // reused by every Sweep
	swept     time.Duration // end of the last sweep
}

type conn struct {
	k datapath.FlowKey
	v datapath.TCPConn
}

// New returns the feature.
func New() *Feature { return &Feature{} }

func (*Feature) Name() string { return "tcp" }

func (*Feature) DocPage() string { return "docs/tcp.md" }

func (*Feature) Config() config.Feature {
	return config.Feature{Default: true, Brief: "TCP connects, refusals, timeouts, resets, zero windows"}
}

func (*Feature) Doc() string {
	return "TCP connection health: role, connects (refused, timed out), SYN retransmits, resets, zero windows, handshake latency"
}

// Plan switches the segments' reading on inside the TC programs and
// attaches the socket-state hook that sees clients give up.
func (*Feature) Plan(*btf.Spec) datapath.Plan {
	return datapath.Plan{Name: "tcp",
		TC:         map[string]any{"tcp_on": uint32(1)},
		Candidates: []datapath.Candidate{{Program: "tcp_state", Attach: datapath.Tracing}}, // tp_btf/inet_sock_set_state
		MapSizes:   map[string]uint32{datapath.MapTCPConns: Connections, datapath.MapTCPZwin: zeroWindowFlows}}
}

func (*Feature) Fields() []string {
	return []string{"tcp_role", "tcp_connects", "tcp_refused", "tcp_timeouts", "tcp_syn_retrans",
		"tcp_resets", "tcp_zero_windows", "tcp_handshake_ns", "tcp_handshake_max_ns"}
}

// Fill copies the flow's connection health.
func (*Feature) Fill(r *flow.Record, v *datapath.EnrichValue) {
	r.TCPRole = flow.TCPRole(v.TcpRole)
	r.TCPConnects, r.TCPRefused, r.TCPTimeouts = v.TcpConnects, v.TcpRefused, v.TcpTimeouts
	r.TCPSynRetrans, r.TCPResets, r.TCPZeroWindows = v.TcpSynRetrans, v.TcpResets, v.TcpZeroWindows
	r.TCPHandshake, r.TCPHandshakeMax = time.Duration(v.TcpHandshakeNs), time.Duration(v.TcpHandshakeMaxNs)
}

// Sweep reports the connects abandoned by clients whose sockets are not on
// the node: still pending (no SYN-ACK, no RST, no FIN) with no SYN for
// giveUp by end. It removes each from tcp_conns (the removal is the claim:
// an answer, or the client's socket giving up, that removed it first
// reported it instead) and counts the timeout on the client's flow in the
// ended generation, with the cause of its SYNs' drop when the kernel kept
// one, like the socket hook.
func (f *Feature) Sweep(m *datapath.Maps, end time.Duration, entry func(*datapath.FlowKey) *datapath.EnrichValue) error {
	if m.TCPConns == nil || (f.swept != 0 && end-f.swept < sweepEvery) {
		return nil
	}
	if f.reader == nil {
		f.reader = batchread.NewReader[datapath.FlowKey, datapath.TCPConn](batchread.DefaultChunk, false)
	}
	f.abandoned = f.abandoned[:0]
	_, err := f.reader.Read(m.TCPConns, func(keys []datapath.FlowKey, vals []datapath.TCPConn) error {
		for i := range vals {
			v := &vals[i]
			if v.State&(datapath.TCPConnOpen|datapath.TCPConnFin) == 0 && v.LastNs != 0 &&
				time.Duration(v.LastNs)+giveUp <= end {
				f.abandoned = append(f.abandoned, conn{keys[i], *v})
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read TCP connections: %w", err)
	}
	f.swept = end
	for i := range f.abandoned {
		c := &f.abandoned[i]
		if err := m.TCPConns.Delete(&c.k); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				continue // answered or given up meanwhile: reported by the kernel
			}
			return fmt.Errorf("remove an abandoned TCP connect: %w", err)
		}
		client := c.k // the key is the canonical one of the two flows
		if c.v.State&datapath.TCPConnClientFwd == 0 {
			client.SrcIp, client.DstIp = c.k.DstIp, c.k.SrcIp
			client.SrcPort, client.DstPort = c.k.DstPort, c.k.SrcPort
		}
		v := entry(&client)
		v.TcpTimeouts++
		v.TcpRole = datapath.TCPRoleClient
		if v.DropCause == 0 && v.DropPackets == 0 {
			v.DropCause, v.DropTcpFlags, v.DropTcpState = c.v.DropCause, c.v.DropTcpFlags, c.v.DropTcpState
		}
	}
	return nil
}

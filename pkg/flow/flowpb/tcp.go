package flowpb

import (
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Flow.tcp (feature "tcp").
var tcpGroup = group{
	name: "tcp",
	num:  56,
	toProto: func(dst, spare *flowv1.Flow, r *flow.Record) {
		m := groupMessage(dst, spare, func(f *flowv1.Flow) **flowv1.TCP { return &f.Tcp }, r.HasTCP())
		if m == nil {
			return
		}
		m.TcpRole = r.TCPRole.String()
		m.TcpConnects = r.TCPConnects
		m.TcpRefused = r.TCPRefused
		m.TcpTimeouts = r.TCPTimeouts
		m.TcpSynRetrans = r.TCPSynRetrans
		m.TcpResets = r.TCPResets
		m.TcpZeroWindows = r.TCPZeroWindows
		m.TcpHandshakeNs = uint64(r.TCPHandshake)
		m.TcpHandshakeMaxNs = uint64(r.TCPHandshakeMax)
	},
	toRecord: func(r *flow.Record, f *flowv1.Flow) {
		if m := f.Tcp; m != nil {
			role, _ := flow.ParseTCPRole(m.TcpRole) // another name (a newer agent's): unknown
			r.TCPFields = flow.TCPFields{TCPRole: role, TCPConnects: m.TcpConnects, TCPRefused: m.TcpRefused,
				TCPTimeouts: m.TcpTimeouts, TCPSynRetrans: m.TcpSynRetrans, TCPResets: m.TcpResets,
				TCPZeroWindows: m.TcpZeroWindows, TCPHandshake: time.Duration(m.TcpHandshakeNs),
				TCPHandshakeMax: time.Duration(m.TcpHandshakeMaxNs)}
		}
	},
	validate: func(f *flowv1.Flow) error {
		m := f.Tcp
		if m == nil {
			return nil
		}
		if len(m.TcpRole) > flow.MaxTCPRole { // Bounds: checkBounds has no group of its own for it
			return within(&BoundError{Field: "tcp_role", Len: len(m.TcpRole), Max: flow.MaxTCPRole}, "tcp")
		}
		if m.TcpHandshakeNs > 1<<63-1 || m.TcpHandshakeMaxNs > 1<<63-1 {
			return invalid("tcp handshake latency out of range")
		}
		return nil
	},
}

// appendTCP appends Flow.tcp of r (wire.go).
func appendTCP(b []byte, r *flow.Record) []byte {
	if !r.HasTCP() {
		return b
	}
	b, start := openGroup(b, 56)
	b = appendString(b, 1, r.TCPRole.String())
	b = appendVarint(b, 2, r.TCPConnects)
	b = appendVarint(b, 3, r.TCPRefused)
	b = appendVarint(b, 4, r.TCPTimeouts)
	b = appendVarint(b, 5, r.TCPSynRetrans)
	b = appendVarint(b, 6, r.TCPResets)
	b = appendVarint(b, 7, r.TCPZeroWindows)
	b = appendVarint(b, 8, uint64(r.TCPHandshake))
	b = appendVarint(b, 9, uint64(r.TCPHandshakeMax))
	return closeGroup(b, start)
}

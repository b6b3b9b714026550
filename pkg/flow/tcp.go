package flow

import "time"

// TCPFields are the "tcp" feature's part of a Record: what the flow's source
// did for TCP connection health in the period (docs/tcp.md). The counters
// count segments or connects the source sent, each once, whatever the
// sampling rate (the kernel sees every SYN, RST, FIN and zero-window segment).
type TCPFields struct {
	// TCPRole is the source's role in the connection: TCPRoleClient if it
	// sent the SYN, TCPRoleServer if it answered it; TCPRoleUnknown when
	// the agent did not see the handshake.
	TCPRole TCPRole
	// TCPConnects are the connection attempts the source started (the
	// first SYN of each connection).
	TCPConnects uint64
	// TCPRefused are those answered by a RST.
	TCPRefused uint64
	// TCPTimeouts are those abandoned without an answer (the client gave up).
	TCPTimeouts uint64
	// TCPSynRetrans are the SYNs or SYN-ACKs the source sent again.
	TCPSynRetrans uint64
	// TCPResets are the RST segments the source sent, in any state.
	TCPResets uint64
	// TCPZeroWindows are the segments the source sent advertising a zero
	// receive window.
	TCPZeroWindows uint64
	// TCPHandshake is the SYN to SYN-ACK latency of the source's last
	// connect in the period (0: none answered), TCPHandshakeMax the largest.
	TCPHandshake    time.Duration
	TCPHandshakeMax time.Duration
}

// TCPRole is the role of a flow's source in its TCP connection.
type TCPRole uint8

// The TCP roles (JSON "tcp_role": "", "client", "server").
const (
	TCPRoleUnknown TCPRole = 0
	TCPRoleClient  TCPRole = 1
	TCPRoleServer  TCPRole = 2
)

// MaxTCPRole is the longest tcp_role ("client", "server"): the bound a
// collector checks (flowpb.Bounds).
const MaxTCPRole = 6

// String is the role's name in every encoding: "client", "server", or ""
// when unknown (or out of range).
func (r TCPRole) String() string {
	switch r {
	case TCPRoleClient:
		return "client"
	case TCPRoleServer:
		return "server"
	}
	return ""
}

// ParseTCPRole is the role named s (String's inverse); false for a name
// that is none of "", "client", "server".
func ParseTCPRole(s string) (TCPRole, bool) {
	switch s {
	case "":
		return TCPRoleUnknown, true
	case "client":
		return TCPRoleClient, true
	case "server":
		return TCPRoleServer, true
	}
	return TCPRoleUnknown, false
}

var tcpGroup = Group{
	Name: "tcp",
	JSONFields: []string{"tcp_role", "tcp_connects", "tcp_refused", "tcp_timeouts", "tcp_syn_retrans",
		"tcp_resets", "tcp_zero_windows", "tcp_handshake_ns", "tcp_handshake_max_ns"},
	Sample: func(r *Record) {
		r.TCPFields = TCPFields{TCPRole: TCPRoleClient, TCPConnects: 3, TCPRefused: 1, TCPTimeouts: 1,
			TCPSynRetrans: 2, TCPResets: 1, TCPZeroWindows: 5, TCPHandshake: 150 * time.Microsecond,
			TCPHandshakeMax: 300 * time.Microsecond}
	},
	Has: func(r *Record) bool { return r.HasTCP() },
}

// HasTCP reports whether the record carries any tcp field (feature "tcp").
func (g *TCPFields) HasTCP() bool {
	return g.TCPRole != 0 || g.TCPConnects != 0 || g.TCPRefused != 0 || g.TCPTimeouts != 0 ||
		g.TCPSynRetrans != 0 || g.TCPResets != 0 || g.TCPZeroWindows != 0 || g.TCPHandshake != 0 ||
		g.TCPHandshakeMax != 0
}

// TCPFailed are the source's connects that failed in the period: refused
// or timed out.
func (g *TCPFields) TCPFailed() uint64 { return g.TCPRefused + g.TCPTimeouts }

// TCPEstablished are the source's connects of the period that were
// answered by a SYN-ACK: neither refused nor timed out. A connect whose
// answer comes in a later period counts there, so over one period this is
// an estimate (never negative).
func (g *TCPFields) TCPEstablished() uint64 {
	if f := g.TCPFailed(); f < g.TCPConnects {
		return g.TCPConnects - f
	}
	return 0
}

// appendJSON appends the tcp_* fields of a flow that carries any.
func (g *TCPFields) appendJSON(b []byte) []byte {
	if !g.HasTCP() {
		return b
	}
	b = append(b, `,"tcp_role":"`...)
	b = append(b, g.TCPRole.String()...)
	b = append(b, '"')
	b = appendUint(b, `,"tcp_connects":`, g.TCPConnects)
	b = appendUint(b, `,"tcp_refused":`, g.TCPRefused)
	b = appendUint(b, `,"tcp_timeouts":`, g.TCPTimeouts)
	b = appendUint(b, `,"tcp_syn_retrans":`, g.TCPSynRetrans)
	b = appendUint(b, `,"tcp_resets":`, g.TCPResets)
	b = appendUint(b, `,"tcp_zero_windows":`, g.TCPZeroWindows)
	b = appendUint(b, `,"tcp_handshake_ns":`, uint64(g.TCPHandshake))
	return appendUint(b, `,"tcp_handshake_max_ns":`, uint64(g.TCPHandshakeMax))
}

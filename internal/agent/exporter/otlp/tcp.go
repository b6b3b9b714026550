package otlp

import "github.com/flowlens/flowlens/pkg/flow"

// The "tcp" feature's attributes, on TCP flows with any tcp field:
// flowlens.tcp_* (the semantic conventions have no connection-health
// attributes).
var (
	kFlowlensTCPRole           = newKey("flowlens.tcp_role")
	kFlowlensTCPConnects       = newKey("flowlens.tcp_connects")
	kFlowlensTCPRefused        = newKey("flowlens.tcp_refused")
	kFlowlensTCPTimeouts       = newKey("flowlens.tcp_timeouts")
	kFlowlensTCPSynRetrans     = newKey("flowlens.tcp_syn_retrans")
	kFlowlensTCPResets         = newKey("flowlens.tcp_resets")
	kFlowlensTCPZeroWindows    = newKey("flowlens.tcp_zero_windows")
	kFlowlensTCPHandshakeNs    = newKey("flowlens.tcp_handshake_ns")
	kFlowlensTCPHandshakeMaxNs = newKey("flowlens.tcp_handshake_max_ns")
)

var tcpGroup = group{name: "tcp", attributes: tcpAttributes}

// tcpAttributes appends the group's attributes of r: the role when known,
// the counters and latencies always (0 included), like the JSON.
func tcpAttributes(_ *encoder, b []byte, r *flow.Record) []byte {
	if !r.HasTCP() {
		return b
	}
	const a = fLRAttributes
	if r.TCPRole != flow.TCPRoleUnknown {
		b = kvText(b, a, kFlowlensTCPRole, r.TCPRole.String())
	}
	b = kvInt(b, a, kFlowlensTCPConnects, int64(r.TCPConnects))
	b = kvInt(b, a, kFlowlensTCPRefused, int64(r.TCPRefused))
	b = kvInt(b, a, kFlowlensTCPTimeouts, int64(r.TCPTimeouts))
	b = kvInt(b, a, kFlowlensTCPSynRetrans, int64(r.TCPSynRetrans))
	b = kvInt(b, a, kFlowlensTCPResets, int64(r.TCPResets))
	b = kvInt(b, a, kFlowlensTCPZeroWindows, int64(r.TCPZeroWindows))
	b = kvInt(b, a, kFlowlensTCPHandshakeNs, int64(r.TCPHandshake))
	return kvInt(b, a, kFlowlensTCPHandshakeMaxNs, int64(r.TCPHandshakeMax))
}

package flowquery

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// tcpFailed: the flow's source had connects that failed in the period,
// refused or timed out (tcp_refused + tcp_timeouts > 0, feature tcp).
func tcpFailed(ff *flowv1.FlowFilter) ([]check, error) {
	return one(ff.TcpFailed, func(f *enriched.Flow) bool { return f.TCPFailed() > 0 }), nil
}

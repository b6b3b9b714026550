package flowquery

import (
	"fmt"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// tcpFlags: a TCP flow whose tcp_flags have all the bits of one of the
// masks (observe turns SYN|ACK, SYN_ACK... into masks).
func tcpFlags(ff *flowv1.FlowFilter) ([]check, error) {
	v := ff.TcpFlags
	for _, m := range v {
		if m == 0 || m > 0xffff {
			return nil, fmt.Errorf("tcp_flags: %#x is not a flag mask (1 to 0xffff)", m)
		}
	}
	return one(len(v) > 0, func(f *enriched.Flow) bool {
		if f.Proto != 6 {
			return false
		}
		for _, m := range v {
			if uint32(f.TCPFlags)&m == m {
				return true
			}
		}
		return false
	}), nil
}

package flowquery

import (
	"fmt"
	"strings"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// TCPResults are tcp_result's values: the results of a connect, as the
// result label of flowlens_collector_tcp_connects_total names them.
var TCPResults = []string{"established", "refused", "timeout"}

// tcpHad reports whether f's source had connects with result r in the
// period (r one of TCPResults).
func tcpHad(f *enriched.Flow, r string) bool {
	switch r {
	case "established":
		return f.TCPEstablished() > 0
	case "refused":
		return f.TCPRefused > 0
	case "timeout":
		return f.TCPTimeouts > 0
	}
	return false
}

// tcpResult: the flow's source had connects with one of the results in the
// period (feature tcp).
func tcpResult(ff *flowv1.FlowFilter) ([]check, error) {
	v := ff.TcpResult
	for _, r := range v {
		if !in(TCPResults, r) {
			return nil, fmt.Errorf("tcp_result: %q is not a connect result (%s)", r, strings.Join(TCPResults, ", "))
		}
	}
	return one(len(v) > 0, func(f *enriched.Flow) bool {
		for _, r := range v {
			if tcpHad(f, r) {
				return true
			}
		}
		return false
	}), nil
}

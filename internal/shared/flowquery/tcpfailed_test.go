package flowquery

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// Flows whose source had refused or timed-out connects; a flow without
// tcp fields, or with only established connects, has none.
func TestTCPFailed(t *testing.T) {
	f, ok, refused, timedOut := base(), base(), base(), base()
	ok.TCPConnects = 5
	refused.TCPConnects, refused.TCPRefused = 5, 1
	timedOut.TCPTimeouts = 1 // its connect was in an earlier period
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{TcpFailed: true}, refused, true},
		{&flowv1.FlowFilter{TcpFailed: true}, timedOut, true},
		{&flowv1.FlowFilter{TcpFailed: true}, ok, false},
		{&flowv1.FlowFilter{TcpFailed: true}, f, false},
	})
}

package flowquery

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// Flows whose source had connects with one of the results: established
// is connects - refused - timeouts; unknown names are refused by name.
func TestTCPResult(t *testing.T) {
	f, ok, refused, allFailed := base(), base(), base(), base()
	ok.TCPConnects = 5
	refused.TCPConnects, refused.TCPRefused = 5, 1
	allFailed.TCPConnects, allFailed.TCPRefused, allFailed.TCPTimeouts = 2, 1, 1
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{TcpResult: []string{"established"}}, ok, true},
		{&flowv1.FlowFilter{TcpResult: []string{"established"}}, refused, true},
		{&flowv1.FlowFilter{TcpResult: []string{"established"}}, allFailed, false},
		{&flowv1.FlowFilter{TcpResult: []string{"refused"}}, refused, true},
		{&flowv1.FlowFilter{TcpResult: []string{"refused"}}, ok, false},
		{&flowv1.FlowFilter{TcpResult: []string{"timeout"}}, allFailed, true},
		{&flowv1.FlowFilter{TcpResult: []string{"timeout"}}, refused, false},
		{&flowv1.FlowFilter{TcpResult: []string{"timeout", "refused"}}, refused, true},
		{&flowv1.FlowFilter{TcpResult: []string{"established", "refused", "timeout"}}, f, false},
	})
	checkErrors(t, map[string]*flowv1.FlowFilter{
		`filters[1].tcp_result: "reset" is not a connect result (established, refused, timeout)`: {TcpResult: []string{"refused", "reset"}},
	})
	if n := Terms([]*flowv1.FlowFilter{{TcpFailed: true, TcpResult: []string{"refused", "timeout"}}}); n != 3 {
		t.Errorf("Terms = %d, want 3", n)
	}
}

package flowquery

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// A pod at either end, by name or namespace/name; a Service of that name
// is not a pod.
func TestPod(t *testing.T) {
	f, plain, svc := base(), base(), base()
	plain.Enriched = false
	svc.Dst.Kind = "service"
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{Pod: []string{"db-0"}}, f, true},
		{&flowv1.FlowFilter{Pod: []string{"shop/web-1"}}, f, true},
		{&flowv1.FlowFilter{Pod: []string{"data/web-1"}}, f, false},
		{&flowv1.FlowFilter{Pod: []string{"db-0"}}, plain, false},
		{&flowv1.FlowFilter{Pod: []string{"db-0"}}, svc, false},
	})
}

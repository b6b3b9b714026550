package main

import (
	"context"
	"strings"
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The end on stderr, merged over two collectors: each agent is connected
// to one of them, so a node one collector lacks but the other captured on
// is not reported missing; losses add up; a clamped snaplen is said.
func TestCaptureReportMergesCollectors(t *testing.T) {
	r := &captured{written: 7, snaplen: 1500, ends: []*flowv1.CaptureEnd{
		{Reason: "duration", NotCaptured: map[string]uint64{"ring_full": 3}, Nodes: []*flowv1.NodeCaptureEnd{
			{Node: "node-a", Packets: 4, Snaplen: 128, Reason: "duration"},
			{Node: "node-b", Error: "no agent of this node is connected to this collector"},
			{Node: "node-c", Error: "no agent of this node is connected to this collector"}}},
		{Reason: "duration", NotCaptured: map[string]uint64{"ring_full": 2, "relay": 1}, Nodes: []*flowv1.NodeCaptureEnd{
			{Node: "node-a", Error: "no agent of this node is connected to this collector"},
			{Node: "node-b", Packets: 3, Snaplen: 1500, Reason: "duration"},
			{Node: "node-c", Error: "no agent of this node is connected to this collector"}}},
	}}
	var b strings.Builder
	r.report(&b)
	want := "7 packets captured\n" +
		"1 packets not captured: relay (the collector could not pass them on fast enough)\n" +
		"5 packets not captured: ring full (the kernel ring could not take them)\n" +
		"capture ended: --duration passed\n" +
		"node node-c: no agent of this node is connected to this collector\n" +
		"node node-a: snaplen clamped to 128 bytes (its agent's --capture-max-snaplen)\n"
	if b.String() != want {
		t.Errorf("report:\n%s\nwant\n%s", b.String(), want)
	}
}

// No agent could capture: the CLI exits 3 and says why per node, or per
// collector when it had no agent at all; one node that captured (even
// nothing) or an interruption is not that.
func TestCaptureNoneCaptured(t *testing.T) {
	none := &captured{noAgents: []string{"pod flowlens/flowlens-collector-1"}, ends: []*flowv1.CaptureEnd{
		{Reason: "no_agent", Nodes: []*flowv1.NodeCaptureEnd{
			{Node: "node-a", Error: "capture is disabled on this node's agent (--capture=false; the operator's spec.agent.capture.enable)"},
			{Node: "node-b", Error: "too many captures running on this node (4)"}}},
		{Reason: "no_agent"},
	}}
	var b strings.Builder
	none.report(&b)
	want := "0 packets captured\n" +
		"capture ended: no agent of a matching node could capture\n" +
		"node node-a: capture is disabled on this node's agent (--capture=false; the operator's spec.agent.capture.enable)\n" +
		"node node-b: too many captures running on this node (4)\n" +
		"collector pod flowlens/flowlens-collector-1: no agent is connected to it\n"
	if !none.noneCaptured() || b.String() != want {
		t.Errorf("noneCaptured %v, report:\n%s\nwant\n%s", none.noneCaptured(), b.String(), want)
	}
	some := &captured{noAgents: []string{"c1"}, ends: []*flowv1.CaptureEnd{{Reason: "no_agent"},
		{Reason: "duration", Nodes: []*flowv1.NodeCaptureEnd{{Node: "node-a", Reason: "duration"}}}}}
	b.Reset()
	some.report(&b)
	if some.noneCaptured() || b.String() != "0 packets captured\ncapture ended: --duration passed\n" {
		t.Errorf("a node captured nothing: noneCaptured %v, report %q", some.noneCaptured(), b.String())
	}
	if (&captured{interrupted: true}).noneCaptured() {
		t.Error("an interrupted capture counted as none captured")
	}
}

// The real CLI against a real collector no agent is connected to: exit 3,
// and why (the collector has none; the node asked has none).
func TestCaptureNoAgentExit(t *testing.T) {
	col, _ := startCollectorProc(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "0 packets captured\ncapture ended: no agent of a matching node could capture\ncollector " + col + ": no agent is connected to it\n"},
		{[]string{"--node", "worker-9"}, "0 packets captured\ncapture ended: no agent of a matching node could capture\nnode worker-9: no agent of this node is connected to this collector\n"},
	} {
		var out, errOut strings.Builder
		code := run(context.Background(), append([]string{"capture", "--server", col, "-o", "json", "--duration", "1s"}, c.args...),
			func(string) string { return "" }, &out, &errOut)
		if code != exitNoCapture || out.String() != "" || errOut.String() != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 3 and %q", c.args, code, out.String(), errOut.String(), c.want)
		}
	}
}

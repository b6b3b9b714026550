package main

import (
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
			{Node: "node-b", Packets: 3, Snaplen: 1500, Reason: "duration"}}},
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

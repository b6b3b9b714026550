package main

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// getFlows asks the collector at addr for its whole history.
func getFlows(t *testing.T, addr string) ([]*flowv1.HistoryFlow, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := flowv1.NewFlowHistoryClient(conn).GetFlows(context.Background(), &flowv1.GetFlowsRequest{})
	if err != nil {
		return nil, err
	}
	var out []*flowv1.HistoryFlow
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r.GetFlow())
	}
}

// The history is served on --listen and keeps --history-size flows;
// --history-size 0 serves none.
func TestHistoryOnListen(t *testing.T) {
	addr, _, stop := start(t, "--history-size", "2")
	recs := records()
	send(t, addr, recs)
	got, err := getFlows(t, addr)
	if err != nil || len(got) != 2 {
		t.Fatalf("history: %d flows, %v; want the last 2", len(got), err)
	}
	// The last two received, sorted by end time (the third ends first).
	for i, h := range got {
		if want := []uint16{recs[2].SrcPort, recs[1].SrcPort}[i]; h.Flow.SrcPort != uint32(want) || h.Flow.NodeName != "node-7" {
			t.Errorf("flow %d: port %d node %q, want %d node-7", i, h.Flow.SrcPort, h.Flow.NodeName, want)
		}
	}
	stop()

	addr, _, stop = start(t, "--history-size", "0")
	defer stop()
	if _, err := getFlows(t, addr); status.Code(err) != codes.Unimplemented {
		t.Fatalf("--history-size 0: %v, want Unimplemented", err)
	}
}

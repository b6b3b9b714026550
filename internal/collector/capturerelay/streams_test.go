package capturerelay

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// AgentCapture streams are bounded, on a real gRPC server: MaxStreams (2)
// in all, refused past it with ResourceExhausted naming --max-agents and
// counted (max_agents); one per agent identity: a newer stream of node-a
// ends the older with Aborted, counted (replaced), and takes no new slot.
func TestAgentCaptureStreamsBounded(t *testing.T) {
	s := New(Options{MaxStreams: 2})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	s.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// open opens node's stream and says hello; its end is on the channel.
	open := func(node string) <-chan error {
		st, err := flowv1.NewPacketCaptureClient(conn).AgentCapture(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&flowv1.AgentCaptureMessage{Message: &flowv1.AgentCaptureMessage_Hello{Hello: &flowv1.AgentHello{Node: node, Enabled: true}}}); err != nil {
			t.Fatal(err)
		}
		end := make(chan error, 1)
		go func() {
			for {
				if _, err := st.Recv(); err != nil {
					end <- err
					return
				}
			}
		}()
		return end
	}
	waitAgents := func(want ...string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			got := s.Agents()
			if len(got) == len(want) && (len(want) == 0 || got[0] == want[0]) && (len(want) < 2 || got[1] == want[1]) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("agents %v after 30s, want %v", got, want)
			}
		}
	}
	endOf := func(ch <-chan error) error {
		t.Helper()
		select {
		case err := <-ch:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("the stream did not end in 30s")
			return nil
		}
	}
	a1 := open("node-a")
	b := open("node-b")
	waitAgents("node-a", "node-b")
	err = endOf(open("node-c"))
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "capture: 2 agent capture streams are open (the collector's --max-agents)" {
		t.Errorf("a third agent's stream: %v, want ResourceExhausted naming --max-agents", err)
	}
	// node-a again (reconnecting): admitted, the old stream ended.
	a2 := open("node-a")
	err = endOf(a1)
	if status.Code(err) != codes.Aborted || status.Convert(err).Message() != "capture: a newer capture stream of this agent (node) replaced this one" {
		t.Errorf("node-a's older stream: %v, want Aborted", err)
	}
	waitAgents("node-a", "node-b")
	fams := promtest.Gather(t, s.Collectors()...)
	promtest.Expect(t, fams, 1, MetricRefused, "reason="+RefusedMaxAgents)
	promtest.Expect(t, fams, 1, MetricRefused, "reason="+RefusedReplaced)
	promtest.Expect(t, fams, 2, MetricStreams)
	select {
	case err := <-a2:
		t.Errorf("node-a's newer stream ended: %v", err)
	case err := <-b:
		t.Errorf("node-b's stream ended: %v", err)
	default:
	}
}

// A stream that says no hello within helloTimeout is ended
// (DeadlineExceeded) and holds no agent slot.
func TestAgentCaptureHelloTimeout(t *testing.T) {
	old := helloTimeout
	helloTimeout = 200 * time.Millisecond
	t.Cleanup(func() { helloTimeout = old })
	s := New(Options{MaxStreams: 1})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	s.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := flowv1.NewPacketCaptureClient(conn).AgentCapture(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	if status.Code(err) != codes.DeadlineExceeded || status.Convert(err).Message() != "capture: no hello within 200ms" {
		t.Errorf("a silent stream: %v, want DeadlineExceeded", err)
	}
	if a := s.Agents(); len(a) != 0 {
		t.Errorf("agents %v, want none", a)
	}
}

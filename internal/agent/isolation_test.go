package agent_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

func queueNamed(t *testing.T, qs exporter.Fanout, name string) *exporter.Queue {
	t.Helper()
	for _, q := range qs {
		if q.Name() == name {
			return q
		}
	}
	t.Fatalf("no %s exporter queue", name)
	return nil
}

// A dead gRPC exporter beside a healthy stdout exporter, under load: small
// queues (two batches), small batches (five flows) and thousands of flows
// over several evictions, the dead exporter first in --export. The gRPC
// queue fills at once, waits out its own budget at each eviction and then
// drops its oldest batches; the stdout exporter, whose budget the dead one
// cannot spend, drops nothing: every flow the agent evicted reaches the
// pipe, and the test's flows carry exactly the packets sent.
func TestDeadGRPCExporterDoesNotMakeStdoutDrop(t *testing.T) {
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	// The stdout exporter writes into a pipe, as in a container, read to
	// the end here.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	t.Cleanup(func() { pw.Close() }) // if Start fails; closed below otherwise
	var out bytes.Buffer
	readDone := make(chan error, 1)
	go func() { _, err := io.Copy(&out, pr); readDone <- err }()
	h := agenttest.Start(t, 2, agent.Options{Stdout: pw}, p.NetnsArg(),
		"--export=grpc,stdout", "--target="+testkit.SilentListener(t),
		"--export-buffer=2", "--grpc-batch-size=5", "--cache-active-timeout=1s",
		// No enrichment hook: they see the whole host (other tests' drops
		// would add partial records); the TC programs see only this pair.
		"--features=none")
	a := h.A

	// Load: 4000 flows of 3 packets, sent over about three evictions.
	const flows, per = 4000, 3
	start := time.Now()
	for i := 0; i < flows; i++ {
		if err := netlab.UDPSend(p.A, fmt.Sprintf("%s:%d", p.IPA, 20000+i), p.IPB+":9000", []byte("iso"), per); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			time.Sleep(time.Second - time.Since(start)%time.Second) // spread over evictions
		}
	}
	time.Sleep(1200 * time.Millisecond) // one more timer eviction with the dead exporter

	h.Stop()
	pw.Close()
	if err := <-readDone; err != nil {
		t.Fatal(err)
	}

	std, grpc := queueNamed(t, a.Queues, "stdout"), queueNamed(t, a.Queues, "grpc")
	if d, f := std.Stats.DroppedBatches.Load(), std.Stats.DroppedFlows.Load(); d != 0 || f != 0 {
		t.Errorf("stdout exporter dropped %d batches / %d flows beside the dead gRPC exporter, want 0", d, f)
	}
	if std.Stats.Errors.Load() != 0 {
		t.Errorf("stdout exporter: %d failed exports", std.Stats.Errors.Load())
	}
	if grpc.Stats.DroppedBatches.Load() == 0 || grpc.Stats.Flows.Load() != 0 {
		t.Errorf("gRPC exporter dropped %d batches and exported %d flows: it was not dead (want drops, 0 flows)",
			grpc.Stats.DroppedBatches.Load(), grpc.Stats.Flows.Load())
	}
	ev := a.Evictor.Stats
	evicted := ev.Flows.Load() + ev.OverflowFlows.Load() + ev.PartialFlows.Load()
	got := agenttest.ParseFlows(t, out.String())
	if uint64(len(got)) != evicted || std.Stats.Flows.Load() != evicted {
		t.Errorf("evicted %d flows, stdout exported %d, the pipe got %d lines", evicted, std.Stats.Flows.Load(), len(got))
	}
	pk, _, recs := agenttest.Sum(got, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 9000, Proto: 17})
	perFlow := map[uint16]uint64{}
	for _, f := range recs {
		perFlow[f.SrcPort] += f.Packets
	}
	if pk != flows*per || len(perFlow) != flows {
		for _, f := range recs {
			if f.SrcPort < 20000 || f.SrcPort >= 20000+flows {
				t.Logf("unexpected record %+v", f)
			}
		}
		t.Fatalf("stdout output has %d packets in %d flows of the test traffic, want %d in %d", pk, len(perFlow), flows*per, flows)
	}
	for sport, n := range perFlow {
		if n != per {
			t.Fatalf("flow from port %d: %d packets, want %d", sport, n, per)
		}
	}
	t.Logf("%d flows evicted in %d timer evictions; stdout waited %v, dropped 0; grpc waited %v, dropped %d batches (%d flows)",
		evicted, ev.Evictions[0].Load(), time.Duration(std.Stats.WaitNanos.Load()),
		time.Duration(grpc.Stats.WaitNanos.Load()), grpc.Stats.DroppedBatches.Load(), grpc.Stats.DroppedFlows.Load())
}

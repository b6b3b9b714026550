// Package pipeline_test is the agent's whole pipeline in one test, the place
// to start reading: packets through the real TC program (BPF_PROG_TEST_RUN),
// the kernel's flow map, the evictor, an export queue, the gRPC exporter and
// a real collector receiving the FlowBatch messages. docs/architecture.md
// walks the same path file by file. TestNodeBalance (node_balance_test.go)
// runs the same path for real on a lab node: the real agent and collector,
// every packet of the node against the kernel's counters.
package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/bpfrun"
	"github.com/flowlens/flowlens/internal/testkit/packet"
	"github.com/flowlens/flowlens/pkg/receiver"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// udp4 is an IPv4 UDP frame 10.9.0.1:sport → 10.9.0.2:5353 with n bytes of payload.
func udp4(sport uint16, n int) []byte {
	return packet.Cat(
		packet.Eth(packet.EtherTypeIPv4, packet.MACs(packet.MAC{}, packet.MAC{})),
		packet.IPv4(packet.ProtoUDP, "10.9.0.1", "10.9.0.2", packet.UDPLen+n),
		packet.UDP(sport, 5353, n))
}

// The kernel's flows, evicted by the real evictor into a Queue and the gRPC
// exporter: the collector receives exactly the flows the evictor produced,
// with the packet and byte counts the datapath counted.
func TestOnePacketToTheGRPCMessage(t *testing.T) {
	testkit.NeedRoot(t, "BPF programs and maps")
	// 1. The datapath: maps and the TC programs (internal/agent/datapath, bpf/flows.h).
	dp, err := datapath.Load(datapath.Config{MaxFlows: 4096, Sampling: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	// 2. A collector, and the gRPC exporter behind its bounded queue (internal/agent/exporter).
	rec := receivertest.Start(t, receiver.Options{})
	exp, err := grpcexp.New(grpcexp.Config{Target: rec.Addr, NodeName: "node-a",
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, ConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	q := exporter.NewQueue(exp, 64, nil)
	go q.Run(context.Background())
	// 3. The evictor between them (internal/agent/evictor), over the datapath's
	// eviction protocol (datapath.Generations).
	gens, err := datapath.NewGenerations(&dp.Maps, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := evictor.New(evictor.Config{Generations: gens, Clock: dp.Clock, Overflow: dp.Maps.Overflow,
		MaxFlows: 4096, Period: time.Hour, BatchSize: 64, Sink: exporter.Fanout{q}})
	if err != nil {
		t.Fatal(err)
	}
	progs, err := dp.ProgramsFor(0)
	if err != nil {
		t.Fatal(err)
	}

	// The packets: 1000 flows, 1 to 4 packets each.
	const flows = 1000
	var wantPackets, wantBytes uint64
	for i := 0; i < flows; i++ {
		pkt := udp4(uint16(1000+i), i%50)
		n := uint32(i%4 + 1)
		if _, err := bpfrun.Exactly(progs.Ingress, pkt, int(n)); err != nil {
			t.Fatal(err)
		}
		wantPackets += uint64(n)
		wantBytes += uint64(n) * uint64(len(pkt))
	}
	if err := ev.Evict(evictor.ReasonTimer); err != nil {
		t.Fatal(err)
	}
	if err := ev.Shutdown(); err != nil { // a second, empty eviction
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}

	if n := ev.Stats.Flows.Load(); n != flows {
		t.Fatalf("evictor produced %d flows, want %d", n, flows)
	}
	got := rec.Flows()
	if len(got) != flows {
		t.Fatalf("collector received %d flows, want %d", len(got), flows)
	}
	bytes, packets := receivertest.Sums(got)
	if packets != wantPackets || bytes != wantBytes {
		t.Fatalf("collector sums packets=%d bytes=%d, want %d and %d", packets, bytes, wantPackets, wantBytes)
	}
	ports := map[uint32]bool{}
	for _, f := range got {
		if ports[f.SrcPort] {
			t.Fatalf("flow from port %d received twice", f.SrcPort)
		}
		ports[f.SrcPort] = true
	}
	if q.Stats.DroppedBatches.Load() != 0 || q.Stats.Errors.Load() != 0 {
		t.Fatalf("dropped=%d errors=%d", q.Stats.DroppedBatches.Load(), q.Stats.Errors.Load())
	}
}

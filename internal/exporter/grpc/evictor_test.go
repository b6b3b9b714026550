package grpc_test

import (
	"context"
	"encoding/binary"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/datapath"
	"github.com/flowlens/flowlens/internal/evictor"
	"github.com/flowlens/flowlens/internal/exporter"
	grpcexp "github.com/flowlens/flowlens/internal/exporter/grpc"
	"github.com/flowlens/flowlens/pkg/collector"
	"github.com/flowlens/flowlens/pkg/collector/collectortest"
)

func udp4(sport uint16, payload int) []byte {
	b := make([]byte, 14+20+8+payload)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(28+payload))
	ip[8] = 64
	ip[9] = 17
	copy(ip[12:16], []byte{10, 9, 0, 1})
	copy(ip[16:20], []byte{10, 9, 0, 2})
	binary.BigEndian.PutUint16(ip[20:], sport)
	binary.BigEndian.PutUint16(ip[22:], 5353)
	binary.BigEndian.PutUint16(ip[24:], uint16(8+payload))
	return b
}

// The kernel's flows, evicted by the real evictor into a Queue and the grpc
// exporter: the collector receives exactly the flows the evictor produced,
// with the packet and byte counts the datapath counted.
func TestEvictedFlowsReachTheCollectorExactly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF)")
	}
	dp, err := datapath.Load(datapath.Config{MaxFlows: 4096, Sampling: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	rec := collectortest.Start(t, collector.Options{})
	exp := newExporter(t, grpcexp.Config{Target: rec.Addr})
	q := exporter.NewQueue(exp, 64, nil)
	go q.Run(context.Background())
	ev, err := evictor.NewEvictor(evictor.EvictorConfig{
		Maps: dp.Maps, MaxFlows: 4096, Period: time.Hour, BatchSize: 64,
		Sink: q.Push, Counters: dp.ReadCounters,
	})
	if err != nil {
		t.Fatal(err)
	}
	progs, err := dp.ProgramsFor(0)
	if err != nil {
		t.Fatal(err)
	}

	const flows = 1000
	var wantPackets, wantBytes uint64
	for i := 0; i < flows; i++ {
		pkt := udp4(uint16(1000+i), i%50)
		n := uint32(i%4 + 1)
		if _, err := progs.Ingress.Run(&ebpf.RunOptions{Data: pkt, Repeat: n}); err != nil {
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
	if err := q.Close(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}

	if n := ev.Stats.Flows.Load(); n != flows {
		t.Fatalf("evictor produced %d flows, want %d", n, flows)
	}
	got := rec.Flows()
	if len(got) != flows {
		t.Fatalf("collector received %d flows, want %d", len(got), flows)
	}
	bytes, packets := collectortest.Sums(got)
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

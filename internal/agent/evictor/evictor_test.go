package evictor_test

import (
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/agent/feature/registry"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/bpfrun"
	"github.com/flowlens/flowlens/internal/testkit/packet"
	"github.com/flowlens/flowlens/pkg/flow"
)

const testCookie = 0xc0ffee // the netns cookie the test programs are loaded with

// got is what the Sink received, per flow (by source port: one flow each).
type got struct {
	packets     map[uint16]uint64
	records     map[uint16]int
	retransmits map[uint16]uint64
	partial     int
	n           int
}

func newGot() *got {
	return &got{packets: map[uint16]uint64{}, records: map[uint16]int{}, retransmits: map[uint16]uint64{}}
}

func (g *got) add(b *flow.Batch) {
	for i := range b.Records {
		r := &b.Records[i]
		g.n++
		if r.Partial {
			g.partial++
			continue
		}
		g.packets[r.SrcPort] += r.Packets
		g.records[r.SrcPort]++
		g.retransmits[r.SrcPort] += r.Retransmits
	}
}

// An eviction whose read of the ended generation fails after the flip does
// not lose that generation: what it read is exported, the rest by the next
// eviction, before it flips (which would empty the map), exactly once each,
// with the enrichment merged; the failure is counted.
//
// The failures are real syscall failures on the real maps: the map's file
// descriptor is closed under the reader (after a clone of it took its place
// in datapath.Maps, which Generations reads, so the kernel map lives on and
// the next eviction reads it through the clone): once in the middle of the
// flow map's walk (the Sink is only used to time the close after the first
// chunk), once at the first read of the enrichment map.
func TestEvictKeepsGenerationWhenReadFails(t *testing.T) {
	testkit.NeedRoot(t, "BPF")
	dp, err := datapath.Load(datapath.Config{MaxFlows: 16384, Sampling: 1, Enrichment: true})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { dp.Close() })
	progs, err := dp.ProgramsFor(testCookie)
	if err != nil {
		t.Fatal(err)
	}
	gens, err := datapath.NewGenerations(&dp.Maps, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Test-run packets are on loopback: their flows' keys have its zone.
	cookie, err := ifaces.NetnsCookie("")
	if err != nil {
		t.Fatal(err)
	}
	zone, err := dp.Maps.Zone(datapath.LoopbackIfindex, cookie)
	if err != nil {
		t.Fatal(err)
	}
	// send counts packets (sport%3 + 1 each) of one UDP flow per source
	// port in the active generation, through the TC program, and an
	// enrichment entry for every seventh flow; it returns what it sent.
	send := func(from, to uint16) (packets, retransmits map[uint16]uint64) {
		t.Helper()
		packets, retransmits = map[uint16]uint64{}, map[uint16]uint64{}
		active := dp.Maps.Enrich[gens.Generation()&1]
		for sport := from; sport < to; sport++ {
			n := int(sport%3) + 1
			frame := packet.Cat(packet.Eth(packet.EtherTypeIPv4),
				packet.IPv4(packet.ProtoUDP, "10.1.0.1", "10.1.0.2", packet.UDPLen+10), packet.UDP(sport, 53, 10))
			if _, err := bpfrun.Exactly(progs.Ingress, frame, n); err != nil {
				t.Fatal(err)
			}
			packets[sport] = uint64(n)
			if sport%7 == 0 {
				k := datapath.FlowKey{SrcPort: sport, DstPort: 53, Proto: 17, Zone: zone}
				copy(k.SrcIp[10:], []byte{0xff, 0xff, 10, 1, 0, 1})
				copy(k.DstIp[10:], []byte{0xff, 0xff, 10, 1, 0, 2})
				if err := active.Put(&k, &datapath.EnrichValue{Retransmits: uint64(sport)}); err != nil {
					t.Fatal(err)
				}
				retransmits[sport] = uint64(sport)
			}
		}
		return packets, retransmits
	}
	merge := func(dst, src map[uint16]uint64) {
		for k, v := range src {
			dst[k] = v
		}
	}
	check := func(stage string, g *got, packets, retransmits map[uint16]uint64) {
		t.Helper()
		if g.partial != 0 {
			t.Errorf("%s: %d partial records, want 0 (every enrichment entry has its flow)", stage, g.partial)
		}
		if len(g.records) != len(packets) {
			t.Errorf("%s: %d flows exported, want %d", stage, len(g.records), len(packets))
		}
		for sport, want := range packets {
			if g.records[sport] != 1 || g.packets[sport] != want || g.retransmits[sport] != retransmits[sport] {
				t.Fatalf("%s: flow %d exported in %d records, %d packets, %d retransmits; want 1, %d, %d",
					stage, sport, g.records[sport], g.packets[sport], g.retransmits[sport], want, retransmits[sport])
			}
		}
	}

	g := newGot()
	var onPush func()
	ev, err := evictor.New(evictor.Config{Generations: gens, Clock: dp.Clock, MaxFlows: 16384, Period: time.Hour, Sampling: 1,
		BatchSize: 100, Features: registry.New(),
		Sink: evictor.SinkFunc(func(b *flow.Batch, _ time.Time) {
			g.add(b)
			b.Release()
			if onPush != nil {
				onPush()
				onPush = nil
			}
		})})
	if err != nil {
		t.Fatal(err)
	}

	// 1. The flow map's walk fails after its first chunk (at most 4096
	// entries of 9000).
	const flows = 9000
	wantP, wantR := send(1000, 1000+flows)
	ended := gens.Generation() & 1 // the map the flip below ends
	onPush = func() {              // the first batch of the ended generation: its first chunk is being converted
		m := dp.Maps.Flows[ended]
		clone, err := m.Clone()
		if err != nil {
			t.Fatal(err)
		}
		dp.Maps.Flows[ended] = clone
		m.Close() // the walk in progress reads through this descriptor
	}
	if err := ev.Evict(evictor.ReasonTimer); err == nil {
		t.Fatal("eviction succeeded although its flow map's descriptor was closed mid-read")
	}
	if n := ev.Stats.ReadFailures.Load(); n != 1 {
		t.Fatalf("read failures %d, want 1", n)
	}
	first := len(g.records)
	if first == 0 || first >= flows {
		t.Fatalf("the failed eviction exported %d flows of %d: the read did not fail mid-walk", first, flows)
	}
	// The next generation: new flows while the failed one waits.
	p2, r2 := send(20000, 20500)
	merge(wantP, p2)
	merge(wantR, r2)
	if err := ev.Evict(evictor.ReasonTimer); err != nil {
		t.Fatalf("eviction after the failure: %v", err)
	}
	check("flow map read failed mid-walk", g, wantP, wantR)
	if n := ev.Stats.Flows.Load(); n != flows+500 || ev.Stats.Evictions[0].Load() != 1 || ev.Stats.ReadFailures.Load() != 1 {
		t.Fatalf("stats: %d flows, %d timer evictions, %d read failures; want %d, 1, 1",
			n, ev.Stats.Evictions[0].Load(), ev.Stats.ReadFailures.Load(), flows+500)
	}
	t.Logf("the failed eviction exported %d flows, the next one the %d others and %d new ones", first, flows-first, 500)

	// 2. The enrichment map's read fails at once: nothing is exported,
	// the next eviction exports the whole generation.
	g = newGot()
	wantP, wantR = send(30000, 30300)
	ended = gens.Generation() & 1
	orig := dp.Maps.Enrich[ended]
	bad, err := orig.Clone()
	if err != nil {
		t.Fatal(err)
	}
	bad.Close()
	dp.Maps.Enrich[ended] = bad
	if err := ev.Evict(evictor.ReasonTimer); err == nil {
		t.Fatal("eviction succeeded although its enrichment map's descriptor was closed")
	}
	dp.Maps.Enrich[ended] = orig
	if n := ev.Stats.ReadFailures.Load(); n != 2 || g.n != 0 {
		t.Fatalf("read failures %d, records exported %d; want 2 and 0", n, g.n)
	}
	p2, r2 = send(40000, 40200)
	merge(wantP, p2)
	merge(wantR, r2)
	if err := ev.Evict(evictor.ReasonShutdown); err != nil {
		t.Fatalf("eviction after the failure: %v", err)
	}
	check("enrichment map read failed", g, wantP, wantR)
	if ev.Stats.Evictions[2].Load() != 1 || ev.Stats.ReadFailures.Load() != 2 {
		t.Fatalf("stats: %d shutdown evictions, %d read failures; want 1 and 2", ev.Stats.Evictions[2].Load(), ev.Stats.ReadFailures.Load())
	}

	// Nothing is left behind: the next eviction finds both maps empty.
	g = newGot()
	if err := ev.Evict(evictor.ReasonTimer); err != nil {
		t.Fatal(err)
	}
	if g.n != 0 {
		t.Fatalf("%d records from empty generations", g.n)
	}
}

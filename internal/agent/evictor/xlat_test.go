package evictor_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/agent/feature/registry"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Feature xlat's delegated counts (bpf/xlat.h, xlat_delegate): an alias
// that counts its flow's counting hook's packets after NAT for the flow it
// names (a host-network client's egress after an OUTPUT DNAT) ends in that
// flow's record, once, whatever order the ended map is walked in, and also
// when the walk fails midway (the generation is kept, its Via flows held
// back until it is read to the end). The entries are put in the real flow
// map as the TC programs leave them (the programs' path to this state is
// TestServiceCountedOnce's, in internal/agent/feature/xlat): a Via flow
// with 2 packets of its own and its alias with 98, a Via flow whose alias
// counted nothing, an alias that only lists hooks (no record, no packets),
// an alias whose flow has no entry (a record of its own under the flow's
// key, so no counted packet is lost), a Via flow (10) whose alias's
// delegation a hand-over took back (40, the alias counting no more) with
// the flow's note (no record), and 9000 ordinary flows.
func TestEvictAddsDelegatedAlias(t *testing.T) {
	testkit.NeedRoot(t, "BPF")
	dp, err := datapath.Load(datapath.Config{MaxFlows: 16384, Sampling: 1})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { dp.Close() })
	gens, err := datapath.NewGenerations(&dp.Maps, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := func(sport, dport uint16) datapath.FlowKey {
		k := datapath.FlowKey{SrcPort: sport, DstPort: dport, Proto: 17}
		copy(k.SrcIp[10:], []byte{0xff, 0xff, 10, 213, 6, 254})
		copy(k.DstIp[10:], []byte{0xff, 0xff, 10, 213, 9, 9})
		return k
	}
	hook := datapath.IfaceObs{Netns: testCookie, Ifindex: 7, Dir: datapath.DirEgress}
	const (
		plain                          = 9000
		viaPort, quietPort, orphanPort = 50001, 50002, 50003
		listedAlias, orphanAlias       = 60003, 60004
		takenPort, takenAlias          = 50004, 60005
	)
	flowOf := func(packets uint64, flags uint8) datapath.FlowValue {
		v := datapath.FlowValue{Packets: packets, Bytes: 100 * packets, N_ifaces: 1, FirstDir: uint8(hook.Dir), Flags: flags,
			FirstSeen: 1, LastSeen: 2}
		v.Ifaces[0] = hook
		return v
	}
	// As xlat_delegate leaves an alias: it counts hook for the flow it
	// names, its counters where a flow value has them (bytes, packets
	// and last_seen: Pad[8:32], bpf/types.h).
	aliasOf := func(to datapath.FlowKey, packets uint64, delegated bool) datapath.XlatFlowAlias {
		a := datapath.XlatFlowAlias{ListedOnly: 1, N_ifaces: 1, Flags: datapath.FlowFlagXlatAlias | 4 /* FLOW_F_XLAT_DONE */}
		a.To.Key, a.To.Netns = to, testCookie
		if delegated {
			a.ListedOnly, a.FirstDir, a.Ifaces[0] = 0, uint8(hook.Dir), hook
		}
		binary.LittleEndian.PutUint64(a.Pad[8:], 100*packets)
		binary.LittleEndian.PutUint64(a.Pad[16:], packets)
		binary.LittleEndian.PutUint64(a.Pad[24:], 3)
		return a
	}
	put := func(k datapath.FlowKey, v any) {
		t.Helper()
		if err := dp.Maps.Flows[gens.Generation()&1].Put(&k, v); err != nil {
			t.Fatal(err)
		}
	}
	g := newGot()
	var onPush func()
	ev, err := evictor.New(evictor.Config{Generations: gens, Clock: dp.Clock, MaxFlows: 16384, Period: time.Hour, Sampling: 1,
		BatchSize: 100, Features: registry.New(),
		Sink: evictor.SinkFunc(func(b *flow.Batch, _ time.Time) {
			for i := range b.Records {
				if r := &b.Records[i]; r.DstPort != 80 {
					t.Errorf("a record under a tuple after NAT: %v:%d -> %v:%d, %d packets", r.SrcAddr, r.SrcPort, r.DstAddr, r.DstPort, r.Packets)
				}
			}
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
	for _, failMidway := range []bool{false, true} {
		g = newGot()
		for sport := uint16(1); sport <= plain; sport++ {
			v := flowOf(uint64(sport%3+1), 0)
			put(key(sport, 80), &v)
		}
		via := flowOf(2, datapath.FlowFlagXlatVia)
		put(key(viaPort, 80), &via)
		quiet := flowOf(5, datapath.FlowFlagXlatVia)
		put(key(quietPort, 80), &quiet)
		a1 := aliasOf(key(viaPort, 80), 98, true)
		put(key(viaPort, 8080), &a1)
		a2 := aliasOf(key(quietPort, 80), 0, true)
		put(key(quietPort, 8080), &a2)
		a3 := aliasOf(key(plain, 80), 0, false)
		put(key(listedAlias, 8080), &a3)
		a4 := aliasOf(key(orphanPort, 80), 7, true)
		put(key(orphanAlias, 8080), &a4)
		// A delegation taken back (xlat_handover): the alias keeps what it
		// counted, for its Via flow; the flow's note names it and is no
		// record (bpf/xlat.h, xlat_note).
		taken := flowOf(10, datapath.FlowFlagXlatVia)
		put(key(takenPort, 80), &taken)
		a5 := aliasOf(key(takenPort, 80), 40, false)
		put(key(takenAlias, 8080), &a5)
		note := datapath.XlatFlowAlias{ListedOnly: 1, Flags: datapath.FlowFlagXlatAlias | 4 | 0x40 /* DONE, DEAD */}
		note.To.Key = key(takenAlias, 8080)
		noteKey := key(takenPort, 80)
		noteKey.IcmpType, noteKey.IcmpCode = 0xff, 0xff
		put(noteKey, &note)
		if failMidway {
			ended := gens.Generation() & 1
			onPush = func() { // the walk fails after its first chunk, as in TestEvictKeepsGenerationWhenReadFails
				m := dp.Maps.Flows[ended]
				clone, err := m.Clone()
				if err != nil {
					t.Fatal(err)
				}
				dp.Maps.Flows[ended] = clone
				m.Close()
			}
			if err := ev.Evict(evictor.ReasonTimer); err == nil {
				t.Fatal("eviction succeeded although its flow map's descriptor was closed mid-read")
			}
		}
		if err := ev.Evict(evictor.ReasonTimer); err != nil {
			t.Fatal(err)
		}
		for sport := uint16(1); sport <= plain; sport++ {
			if g.records[sport] != 1 || g.packets[sport] != uint64(sport%3+1) {
				t.Fatalf("fail midway %v: flow %d in %d records with %d packets, want 1 with %d", failMidway, sport, g.records[sport], g.packets[sport], sport%3+1)
			}
		}
		for _, w := range []struct {
			sport   uint16
			packets uint64
		}{{viaPort, 100}, {quietPort, 5}, {orphanPort, 7}, {takenPort, 50}} {
			if g.records[w.sport] != 1 || g.packets[w.sport] != w.packets {
				t.Errorf("fail midway %v: flow %d in %d records with %d packets, want 1 with %d", failMidway, w.sport, g.records[w.sport], g.packets[w.sport], w.packets)
			}
		}
		if g.n != plain+4 || g.partial != 0 {
			t.Errorf("fail midway %v: %d records (%d partial), want %d", failMidway, g.n, g.partial, plain+4)
		}
		t.Logf("fail midway %v: the Via flow's record has %d packets (2 its own, 98 its alias's)", failMidway, g.packets[viaPort])
	}
}

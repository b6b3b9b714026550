package evictor_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/internal/agent/feature/registry"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Benchmarks of the user-space side of an eviction, on real maps. Run with
// `make bench` (no Test function here: `make test` does not run them).
//
// BenchmarkEvict is one steady-state eviction cycle of n flows, as the
// agent runs it: empty the older generation (n entries, batch lookup-and-
// delete), flip, wait for the RCU grace period, batch-read the previous
// generation (n entries, under their locks) and convert each entry to a
// flow.Record handed to the sink in batches of 1000. enrich=all also has an
// enrichment entry for every flow (read, deleted and merged by key);
// enrich=10pct for one flow in ten. The active map is refilled with the
// timer stopped.

var evictSizes = []int{1000, 10000, 100000, 1000000}

func sizeName(n int) string {
	switch {
	case n >= 1000000:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

const benchIfindex, benchCookie = 7, 4026531840

func benchKeys(n int) []datapath.FlowKey {
	keys := make([]datapath.FlowKey, n)
	for i := range keys {
		k := &keys[i]
		k.SrcIp[10], k.SrcIp[11] = 0xff, 0xff
		k.SrcIp[12], k.SrcIp[13], k.SrcIp[14], k.SrcIp[15] = 10, byte(i>>16), byte(i>>8), byte(i)
		k.DstIp[10], k.DstIp[11], k.DstIp[12], k.DstIp[15] = 0xff, 0xff, 10, 1
		k.SrcPort, k.DstPort, k.Proto = uint16(i), 80, 6
	}
	return keys
}

func benchValue() datapath.FlowValue {
	v := datapath.FlowValue{Bytes: 1500, Packets: 1, N_ifaces: 2, FirstDir: 2, EthType: 0x0800,
		FirstSeen: 1e9, LastSeen: 2e9, TcpFlags: 0x10}
	v.Ifaces[0] = datapath.IfaceObs{Netns: benchCookie, Ifindex: benchIfindex, Dir: 2}
	v.Ifaces[1] = datapath.IfaceObs{Netns: benchCookie, Ifindex: benchIfindex + 1, Dir: 1}
	return v
}

func batchUpdate[K, V any](b *testing.B, m *ebpf.Map, keys []K, vals []V) {
	const chunk = 65536
	for i := 0; i < len(keys); i += chunk {
		end := min(i+chunk, len(keys))
		if _, err := m.BatchUpdate(keys[i:end], vals[i:end], nil); err != nil {
			b.Fatalf("fill: %v", err)
		}
	}
}

func BenchmarkEvict(b *testing.B) {
	for _, n := range evictSizes {
		for _, enrich := range []string{"none", "10pct", "all"} {
			b.Run(fmt.Sprintf("flows=%s/enrich=%s", sizeName(n), enrich), func(b *testing.B) {
				benchEvict(b, n, enrich)
			})
		}
	}
}

func benchEvict(b *testing.B, n int, enrich string) {
	dp, err := datapath.Load(datapath.Config{MaxFlows: uint32(n), Enrichment: enrich != "none"})
	if err != nil {
		b.Skipf("load datapath (needs root and BPF): %v", err)
	}
	defer dp.Close()
	keys := benchKeys(n)
	vals := make([]datapath.FlowValue, n)
	for i := range vals {
		vals[i] = benchValue()
	}
	var ekeys []datapath.FlowKey
	switch enrich {
	case "all":
		ekeys = keys
	case "10pct":
		for i := 0; i < n; i += 10 {
			ekeys = append(ekeys, keys[i])
		}
	}
	evals := make([]datapath.EnrichValue, len(ekeys))
	for i := range evals {
		evals[i] = datapath.EnrichValue{RttNs: 150000, RttMaxNs: 300000, Retransmits: 1}
	}

	res := evictor.NewResolver()
	res.Add(evictor.IfaceKey{Netns: benchCookie, Ifindex: benchIfindex}, "veth0", "pod-a")
	res.Add(evictor.IfaceKey{Netns: benchCookie, Ifindex: benchIfindex + 1}, "cni0", "host")
	gens, err := datapath.NewGenerations(&dp.Maps, nil)
	if err != nil {
		b.Fatal(err)
	}
	gens.NoFill = true // no pressure check: the eviction path alone
	var features []feature.Feature
	if enrich != "none" {
		features = registry.New()
	}
	got := 0
	ev, err := evictor.New(evictor.Config{
		// No Overflow: no ring-buffer goroutine, so the allocations counted are the eviction's.
		Generations: gens, Clock: dp.Clock, MaxFlows: uint32(n), Period: time.Hour, Sampling: 1, BatchSize: 1000,
		Resolver: res, Features: features,
		Sink: evictor.SinkFunc(func(b *flow.Batch, _ time.Time) { got += b.Len(); b.Release() }),
	})
	if err != nil {
		b.Fatal(err)
	}
	// fill puts a generation into the active map (and enrichment map).
	fill := func() {
		var ctl uint32 // generation: its parity indexes the active map
		if err := dp.Maps.Control.Lookup(uint32(0), &ctl); err != nil {
			b.Fatal(err)
		}
		ctl &= 1
		batchUpdate(b, dp.Maps.Flows[ctl], keys, vals)
		if len(ekeys) > 0 {
			batchUpdate(b, dp.Maps.Enrich[ctl], ekeys, evals)
		}
	}
	// Two warm-up cycles: both maps hold a generation, buffers exist.
	for range 2 {
		fill()
		got = 0
		if err := ev.Evict(evictor.ReasonTimer); err != nil {
			b.Fatal(err)
		}
	}
	var ms runtime.MemStats
	var mallocs uint64
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		fill()
		got = 0
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		b.StartTimer()
		err := ev.Evict(evictor.ReasonTimer)
		b.StopTimer()
		runtime.ReadMemStats(&ms)
		mallocs += ms.Mallocs - before
		b.StartTimer()
		if err != nil {
			b.Fatal(err)
		}
		if got != n {
			b.Fatalf("%d records, want %d", got, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/flow")
	b.ReportMetric(float64(mallocs)/float64(b.N)/float64(n), "allocs/flow")
}

// benchRecord is a typical record: IPv4 TCP, two interfaces, enrichment set.
func benchRecord() flow.Record {
	return flow.Record{
		SrcAddr: netip.MustParseAddr("10.244.1.17"), DstAddr: netip.MustParseAddr("10.96.0.10"),
		SrcPort: 43512, DstPort: 8080, Proto: 6,
		Bytes: 123456, Packets: 87, TCPFlags: 0x1b | flow.TCPFlagSynAck, EthType: 0x0800,
		SrcMAC: [6]byte{0x02, 0x42, 0xac, 0x11, 0, 2}, DstMAC: [6]byte{0x02, 0x42, 0xac, 0x11, 0, 3},
		StartTime: time.Date(2026, 11, 22, 4, 0, 0, 123456789, time.UTC),
		EndTime:   time.Date(2026, 11, 22, 4, 0, 4, 987654321, time.UTC),
		Interfaces: []flow.Interface{
			{Name: "veth1a2b3c", Ifindex: 7, Netns: "host", NetnsID: benchCookie, Direction: flow.DirIngress},
			{Name: "eth0", Ifindex: 2, Netns: "host", NetnsID: benchCookie, Direction: flow.DirEgress},
		},
		Sampling:          1,
		RTTFields:         flow.RTTFields{RTT: 150 * time.Microsecond, RTTMax: time.Millisecond},
		RetransmitsFields: flow.RetransmitsFields{Retransmits: 1},
	}
}

// BenchmarkAppendJSON encodes one record into a reused buffer (the stdout
// exporter's path).
func BenchmarkAppendJSON(b *testing.B) {
	r := benchRecord()
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = r.AppendJSON(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}

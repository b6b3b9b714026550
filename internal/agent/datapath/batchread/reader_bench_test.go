package batchread_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/datapath/batchread"
)

// Eviction cost of one flow map generation: every entry read (under its
// spin lock, as the evictor reads) and deleted, from a real flow map (the
// datapath's flows_a, 40-byte keys, 152-byte values). Compared:
//
//	reader=batch    batchread.Reader: BPF_MAP_LOOKUP_AND_DELETE_BATCH, 4096 per syscall
//	reader=iterate  batchread.Reader.ForceIterate: GET_NEXT_KEY + LOOKUP + DELETE per key
//	reader=naive    GET_NEXT_KEY + LOOKUP_AND_DELETE per key, a new value each
//
// and two passes the evictor could use instead (for docs/benchmarks.md's
// "where the time goes"):
//
//	reader=batch-nolock      reader=batch without BPF_F_LOCK (the evictor reads
//	                         maps no program writes any more: the lock
//	                         protects nothing there, and costs an irqsave
//	                         per entry)
//	reader=batch-read-only   BPF_MAP_LOOKUP_BATCH without deleting
//	reader=delete-known-keys BPF_MAP_DELETE_BATCH with the keys already known
//	                         (the evictor read them one period earlier)
//
// The map is refilled (BatchUpdate) with the timer stopped. Reported per
// flow: ns/flow and allocs/flow (allocs/op divided by the flow count).
// Run with `make bench`; not part of `make test` (no Test function here).

type (
	flowKey   = datapath.FlowKey
	flowValue = datapath.FlowValue
)

var benchSizes = []int{1000, 10000, 100000, 1000000}

func sizeName(n int) string {
	switch {
	case n >= 1000000:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// flowMap returns the real flow map of a datapath sized for n flows, and a
// refill function.
func flowMap(b *testing.B, n int) (*ebpf.Map, func()) {
	b.Helper()
	dp, err := datapath.Load(datapath.Config{MaxFlows: uint32(n)})
	if err != nil {
		b.Skipf("load datapath (needs root and BPF): %v", err)
	}
	b.Cleanup(func() { dp.Close() })
	m := dp.Maps.Flows[0]
	keys := make([]flowKey, n)
	vals := make([]flowValue, n)
	for i := range keys {
		k := &keys[i]
		k.SrcIp[10], k.SrcIp[11] = 0xff, 0xff
		k.SrcIp[12], k.SrcIp[13], k.SrcIp[14], k.SrcIp[15] = 10, byte(i>>16), byte(i>>8), byte(i)
		k.DstIp[10], k.DstIp[11], k.DstIp[12], k.DstIp[15] = 0xff, 0xff, 10, 1
		k.SrcPort, k.DstPort, k.Proto = uint16(i), 80, 6
		vals[i] = flowValue{Bytes: 1500, Packets: 1, N_ifaces: 1, FirstDir: 1}
		vals[i].Ifaces[0].Ifindex, vals[i].Ifaces[0].Dir = 2, 1
	}
	refill := func() {
		const chunk = 65536
		for i := 0; i < n; i += chunk {
			end := min(i+chunk, n)
			if _, err := m.BatchUpdate(keys[i:end], vals[i:end], nil); err != nil {
				b.Fatalf("refill: %v", err)
			}
		}
	}
	return m, refill
}

func BenchmarkEvictMap(b *testing.B) {
	for _, n := range benchSizes {
		for _, reader := range []string{"batch", "iterate", "naive", "batch-nolock", "batch-read-only", "delete-known-keys"} {
			b.Run(fmt.Sprintf("flows=%s/reader=%s", sizeName(n), reader), func(b *testing.B) {
				m, refill := flowMap(b, n)
				r := batchread.NewReader[flowKey, flowValue](batchread.DefaultChunk, reader != "batch-nolock")
				if reader == "iterate" {
					r.ForceIterate()
				}
				seen := 0
				fn := func(keys []flowKey, vals []flowValue) error {
					for i := range vals {
						seen += int(vals[i].Packets)
					}
					return nil
				}
				known := make([]flowKey, n)
				read := func() (int, error) {
					switch reader {
					case "naive":
						return naive(m, &seen)
					case "batch-read-only":
						return r.Read(m, fn)
					case "delete-known-keys":
						return deleteKeys(m, known)
					default:
						return r.ReadAndDelete(m, fn)
					}
				}
				// One warm-up pass so the reader's buffers exist (steady state).
				refill()
				if reader == "delete-known-keys" {
					i := 0
					if _, err := r.Read(m, func(keys []flowKey, _ []flowValue) error {
						i += copy(known[i:], keys)
						return nil
					}); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := read(); err != nil {
					b.Fatal(err)
				}
				var ms runtime.MemStats
				var mallocs uint64
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					b.StopTimer()
					refill()
					runtime.ReadMemStats(&ms)
					before := ms.Mallocs
					b.StartTimer()
					got, err := read()
					b.StopTimer()
					runtime.ReadMemStats(&ms)
					mallocs += ms.Mallocs - before
					b.StartTimer()
					if err != nil || got != n {
						b.Fatalf("read %d of %d flows: %v", got, n, err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/flow")
				b.ReportMetric(float64(mallocs)/float64(b.N)/float64(n), "allocs/flow")
			})
		}
	}
}

// deleteKeys deletes the given keys with BPF_MAP_DELETE_BATCH, 4096 a call.
func deleteKeys(m *ebpf.Map, keys []flowKey) (int, error) {
	n := 0
	for i := 0; i < len(keys); i += batchread.DefaultChunk {
		end := min(i+batchread.DefaultChunk, len(keys))
		got, err := m.BatchDelete(keys[i:end], nil)
		n += got
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// naive is the per-key loop a reader without batch operations writes:
// next key, then lookup-and-delete into a new value each time.
func naive(m *ebpf.Map, seen *int) (int, error) {
	var key, next flowKey
	n := 0
	err := m.NextKey(nil, &key)
	for err == nil {
		nextErr := m.NextKey(&key, &next)
		v := new(flowValue)
		if lerr := m.LookupAndDeleteWithFlags(&key, v, ebpf.LookupLock); lerr != nil {
			return n, lerr
		}
		*seen += int(v.Packets)
		n++
		key, err = next, nextErr
	}
	if !errors.Is(err, ebpf.ErrKeyNotExist) {
		return n, err
	}
	return n, nil
}

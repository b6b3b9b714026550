package batchread_test

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/flowlens/flowlens/internal/agent/datapath/batchread"
	"github.com/flowlens/flowlens/internal/testkit"
)

type key struct{ A, B uint32 }
type val struct{ X, Y uint64 }

func newMap(t testing.TB, n int) *ebpf.Map {
	t.Helper()
	testkit.NeedRoot(t, "BPF maps")
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 16, MaxEntries: uint32(n + 1)})
	if err != nil {
		t.Fatalf("create map: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	fill(t, m, n)
	return m
}

func fill(t testing.TB, m *ebpf.Map, n int) {
	t.Helper()
	keys := make([]key, n)
	vals := make([]val, n)
	for i := range keys {
		keys[i] = key{uint32(i), ^uint32(i)}
		vals[i] = val{uint64(i), uint64(i) * 3}
	}
	if n == 0 {
		return
	}
	if _, err := m.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatalf("fill: %v", err)
	}
}

func count(t testing.TB, m *ebpf.Map) int {
	t.Helper()
	n := 0
	it := m.Iterate()
	var k key
	var v val
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// check reads m through r and verifies every entry came once with its value.
func check(t *testing.T, r *batchread.Reader[key, val], m *ebpf.Map, n int, del bool) {
	t.Helper()
	seen := make(map[uint32]bool, n)
	fn := func(keys []key, vals []val) error {
		for i, k := range keys {
			if seen[k.A] {
				return fmt.Errorf("key %d seen twice", k.A)
			}
			seen[k.A] = true
			if k.B != ^k.A || vals[i].X != uint64(k.A) || vals[i].Y != uint64(k.A)*3 {
				return fmt.Errorf("entry %d: got key %+v value %+v", k.A, k, vals[i])
			}
		}
		return nil
	}
	var got int
	var err error
	if del {
		got, err = r.ReadAndDelete(m, fn)
	} else {
		got, err = r.Read(m, fn)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got != n || len(seen) != n {
		t.Fatalf("read %d entries (%d distinct), want %d", got, len(seen), n)
	}
	left := count(t, m)
	if del && left != 0 {
		t.Fatalf("%d entries left after ReadAndDelete", left)
	}
	if !del && left != n {
		t.Fatalf("Read changed the map: %d entries, want %d", left, n)
	}
}

func TestReader(t *testing.T) {
	for _, iterate := range []bool{false, true} {
		for _, n := range []int{0, 1, 100, 5000} { // 5000 > chunk: several chunks
			for _, del := range []bool{false, true} {
				t.Run(fmt.Sprintf("iterate=%v/n=%d/delete=%v", iterate, n, del), func(t *testing.T) {
					m := newMap(t, n)
					r := batchread.NewReader[key, val](1024, false)
					if iterate {
						r.ForceIterate()
					}
					check(t, r, m, n, del)
					if !iterate && !r.Batched() {
						t.Fatal("batch operations unexpectedly unsupported")
					}
					// The reader is reusable: refill and read again.
					if del {
						fill(t, m, n)
						check(t, r, m, n, del)
					}
				})
			}
		}
	}
}

func TestReaderCallbackError(t *testing.T) {
	m := newMap(t, 10)
	r := batchread.NewReader[key, val](4, false)
	want := fmt.Errorf("stop")
	got, err := r.Read(m, func([]key, []val) error { return want })
	// A hash map batch holds whole buckets, so the first chunk has 1..4 entries.
	if err != want || got < 1 || got > 4 {
		t.Fatalf("got (%d, %v), want (1..4, stop)", got, err)
	}
}

// Steady state: allocations are per chunk (the cilium/ebpf call boxes its
// slices), never per entry.
func TestReaderAllocsPerChunk(t *testing.T) {
	const n, chunk = 20000, 4096
	m := newMap(t, n)
	r := batchread.NewReader[key, val](chunk, false)
	noop := func([]key, []val) error { return nil }
	allocs := testing.AllocsPerRun(5, func() {
		if _, err := r.Read(m, noop); err != nil {
			t.Fatal(err)
		}
	})
	chunks := n/chunk + 1
	if allocs > float64(4*chunks+4) {
		t.Fatalf("%.0f allocations to read %d entries in %d chunks: want <= %d", allocs, n, chunks, 4*chunks+4)
	}
	t.Logf("%.0f allocations for %d entries", allocs, n)
}

// The chunk follows the map's fill: nothing before the first read, the first
// chunk for a map that fits in it, doubling up to the maximum for one that
// does not (and every entry read once meanwhile, by check).
func TestReaderChunkFollowsFill(t *testing.T) {
	for _, iterate := range []bool{false, true} {
		t.Run(fmt.Sprintf("iterate=%v", iterate), func(t *testing.T) {
			r := batchread.NewReader[key, val](1024, false)
			if iterate {
				r.ForceIterate()
			}
			if c := r.Chunk(); c != 0 {
				t.Fatalf("chunk %d before any read, want 0", c)
			}
			check(t, r, newMap(t, 100), 100, false)
			if c := r.Chunk(); c != 128 {
				t.Fatalf("chunk %d after reading 100 entries, want 128", c)
			}
			check(t, r, newMap(t, 5000), 5000, true)
			if c := r.Chunk(); c != 1024 {
				t.Fatalf("chunk %d after reading 5000 entries, want the maximum 1024", c)
			}
			small := batchread.NewReader[key, val](64, false) // a maximum below the first chunk
			check(t, small, newMap(t, 500), 500, false)
			if c := small.Chunk(); c != 64 {
				t.Fatalf("chunk %d, want the maximum 64", c)
			}
		})
	}
}

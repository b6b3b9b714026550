// Package batchread reads BPF hash maps in bulk with reusable buffers.
//
// A Reader walks a map chunk by chunk with BPF_MAP_LOOKUP_BATCH (or
// BPF_MAP_LOOKUP_AND_DELETE_BATCH) and hands each chunk to a callback, so
// memory stays bounded by the chunk size whatever the map size, and nothing
// is allocated per entry: the key and value slices are owned by the Reader
// and reused by every call. The chunk starts small and doubles, up to its
// maximum, each time a read fills it: a reader of a map that holds a hundred
// flows keeps a few KiB, not the maximum's ~0.8 MiB (issue #33, item 3). On
// kernels without batch operations it falls back to iterating with
// BPF_MAP_GET_NEXT_KEY.
package batchread

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// DefaultChunk is the number of entries read per batch syscall once the
// map's fill asks for it: large enough to amortise the syscall, small enough
// to keep the buffers in cache.
const DefaultChunk = 4096

// firstChunk is the chunk a Reader allocates on its first read; it doubles
// after every read that fills it, up to the Reader's maximum.
const firstChunk = 128

// Reader reads maps with keys of type K and values of type V. K and V must be
// fixed-size types without implicit padding (bpf2go-generated structs are).
// A Reader is not safe for concurrent use.
type Reader[K, V any] struct {
	keys    []K
	vals    []V
	max     int  // the chunk's maximum (NewReader's chunk)
	lock    bool // read values under their bpf_spin_lock (BPF_F_LOCK)
	noBatch bool
	cursor  ebpf.MapBatchCursor
}

// NewReader returns a Reader whose chunks hold at most chunk entries. With
// lock, values are copied under their bpf_spin_lock (BPF_F_LOCK), so a value
// is never seen half-updated. Nothing is allocated before the first read.
func NewReader[K, V any](chunk int, lock bool) *Reader[K, V] {
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	return &Reader[K, V]{max: chunk, lock: lock}
}

// Chunk is the number of entries the Reader's buffers hold now (0 before
// its first read).
func (r *Reader[K, V]) Chunk() int { return len(r.keys) }

// grow makes the buffers hold at least n entries (at most the maximum),
// doubling; it reports whether they grew.
func (r *Reader[K, V]) grow(n int) bool {
	n = min(n, r.max)
	if len(r.keys) >= n {
		return false
	}
	c := max(len(r.keys), min(firstChunk, r.max))
	for c < n {
		c *= 2
	}
	c = min(c, r.max)
	r.keys, r.vals = make([]K, c), make([]V, c)
	return true
}

// Batched reports whether the Reader uses batch syscalls (false after it
// fell back to per-key iteration).
func (r *Reader[K, V]) Batched() bool { return !r.noBatch }

// ForceIterate makes the Reader use the per-key fallback, as on kernels
// without batch operations (tests and benchmarks use it).
func (r *Reader[K, V]) ForceIterate() { r.noBatch = true }

// Read calls fn with every entry of m, a chunk at a time. The slices passed
// to fn are reused after fn returns. Read does not delete anything.
func (r *Reader[K, V]) Read(m *ebpf.Map, fn func(keys []K, vals []V) error) (int, error) {
	return r.walk(m, false, fn)
}

// ReadAndDelete is Read, deleting each chunk as it is read. The map must not
// be written concurrently: an entry inserted behind the cursor would survive.
func (r *Reader[K, V]) ReadAndDelete(m *ebpf.Map, fn func(keys []K, vals []V) error) (int, error) {
	return r.walk(m, true, fn)
}

func (r *Reader[K, V]) walk(m *ebpf.Map, del bool, fn func([]K, []V) error) (int, error) {
	if !r.noBatch {
		n, err := r.walkBatch(m, del, fn)
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return n, err
		}
		r.noBatch = true // kernel < 5.6: fall back for good
	}
	return r.walkIterate(m, del, fn)
}

func (r *Reader[K, V]) opts() *ebpf.BatchOptions {
	if r.lock {
		return &ebpf.BatchOptions{ElemFlags: uint64(ebpf.LookupLock)}
	}
	return nil
}

func (r *Reader[K, V]) walkBatch(m *ebpf.Map, del bool, fn func([]K, []V) error) (int, error) {
	r.cursor = ebpf.MapBatchCursor{}
	opts := r.opts()
	r.grow(1)
	total := 0
	for {
		var n int
		var err error
		if del {
			n, err = m.BatchLookupAndDelete(&r.cursor, r.keys, r.vals, opts)
		} else {
			n, err = m.BatchLookup(&r.cursor, r.keys, r.vals, opts)
		}
		// ENOSPC: a bucket holds more entries than the chunk; nothing was
		// read and the cursor stays on that bucket. Retry with a larger one.
		if n == 0 && errors.Is(err, unix.ENOSPC) && r.grow(2*len(r.keys)) {
			continue
		}
		done := errors.Is(err, ebpf.ErrKeyNotExist)
		if err != nil && !done {
			return total, err
		}
		if n > 0 {
			total += n
			if ferr := fn(r.keys[:n], r.vals[:n]); ferr != nil {
				return total, ferr
			}
		}
		if done {
			return total, nil
		}
		if n == len(r.keys) { // the map holds more than a chunk
			r.grow(2 * n)
		}
	}
}

// walkIterate is the fallback: BPF_MAP_GET_NEXT_KEY + lookup (+ delete).
// The next key is fetched before the current one is deleted, so deleting
// never sends the walk back to the first bucket.
func (r *Reader[K, V]) walkIterate(m *ebpf.Map, del bool, fn func([]K, []V) error) (int, error) {
	flags := ebpf.MapLookupFlags(0)
	if r.lock {
		flags = ebpf.LookupLock
	}
	r.grow(1)
	total, n := 0, 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		total += n
		err := fn(r.keys[:n], r.vals[:n])
		n = 0
		return err
	}
	var key, next K
	err := m.NextKey(nil, &key)
	for err == nil {
		nextErr := m.NextKey(&key, &next)
		if lerr := m.LookupWithFlags(&key, &r.vals[n], flags); lerr == nil {
			r.keys[n] = key
			n++
		} else if !errors.Is(lerr, ebpf.ErrKeyNotExist) {
			return total, fmt.Errorf("lookup: %w", lerr)
		}
		if del {
			if derr := m.Delete(&key); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) {
				return total, fmt.Errorf("delete: %w", derr)
			}
		}
		if n == len(r.keys) {
			if ferr := flush(); ferr != nil {
				return total, ferr
			}
			r.grow(2 * len(r.keys))
		}
		key, err = next, nextErr
	}
	if !errors.Is(err, ebpf.ErrKeyNotExist) {
		return total, fmt.Errorf("next key: %w", err)
	}
	return total, flush()
}

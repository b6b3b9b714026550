package flow

import (
	"sync"
	"sync/atomic"
)

// Batch is a slice of Records on its way from the Evictor to the exporters.
// Batches are recycled: the Evictor takes one from a Pool, fills it and hands
// it on with one reference per consumer; each consumer calls Release once
// when it is done, and the last Release puts the batch back in the Pool. So
// steady-state eviction allocates no records, and the memory of evicted
// flows is bounded by the batches in flight, not by the size of an eviction.
type Batch struct {
	// Records is valid until the consumer's Release; do not keep or modify it.
	Records []Record
	// ifs backs the Records' Interfaces slices: one array per batch.
	ifs  []Interface
	refs atomic.Int32
	pool *Pool
}

// Retain adds n references, for n more consumers. Call it before handing the
// batch to them.
func (b *Batch) Retain(n int) { b.refs.Add(int32(n)) }

// Release drops one reference; the last one returns the batch to its Pool.
func (b *Batch) Release() {
	switch n := b.refs.Add(-1); {
	case n == 0:
		if b.pool != nil {
			b.pool.put(b)
		}
	case n < 0:
		panic("flow: Batch released more often than retained")
	}
}

// BatchOf wraps records made elsewhere (tests, embedders) in a Batch with
// one reference and no Pool: its last Release returns it nowhere.
func BatchOf(records []Record) *Batch {
	b := &Batch{Records: records}
	b.refs.Store(1)
	return b
}

// Len is the number of records.
func (b *Batch) Len() int { return len(b.Records) }

// Full reports whether the batch holds as many records as it can (producers).
func (b *Batch) Full() bool { return len(b.Records) == cap(b.Records) }

// Next extends Records by one zeroed record and returns it (producers: call
// it only while !Full()).
func (b *Batch) Next() *Record {
	b.Records = b.Records[:len(b.Records)+1]
	r := &b.Records[len(b.Records)-1]
	*r = Record{}
	return r
}

// Interfaces returns n slots for one record's Interfaces, carved from the
// batch's own backing array, so filling a batch allocates nothing once the
// array has grown to the node's usual mix (producers). The slots may hold a
// recycled batch's old values: the caller sets every one.
func (b *Batch) Interfaces(n int) []Interface {
	if len(b.ifs)+n > cap(b.ifs) {
		// Out of backing space (flows crossing more interfaces than the two
		// per record first reserved): a larger array, which the batch keeps
		// when recycled. Records already carved keep pointing at the old one.
		b.ifs = make([]Interface, 0, max(2*cap(b.ifs), n))
	}
	start := len(b.ifs)
	b.ifs = b.ifs[:start+n]
	return b.ifs[start : start+n : start+n]
}

// Pool recycles Batches of one size. It never blocks and never refuses: how
// many batches exist at once is bounded by the consumers' queues, which make
// the Evictor wait (see exporter.Queue), not by the Pool.
type Pool struct {
	size int
	mu   sync.Mutex
	free []*Batch
	// Allocated counts the batches ever made (steady state: constant).
	Allocated atomic.Uint64
}

// NewPool returns a Pool of batches holding up to size records each.
func NewPool(size int) *Pool {
	if size <= 0 {
		size = 1000
	}
	return &Pool{size: size}
}

// Get returns an empty batch holding one reference.
func (p *Pool) Get() *Batch {
	p.mu.Lock()
	var b *Batch
	if n := len(p.free); n > 0 {
		b = p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
	}
	p.mu.Unlock()
	if b == nil {
		// Two allocations per batch, none per flow: records, and the backing
		// array of their interfaces (two per record on average).
		b = &Batch{Records: make([]Record, 0, p.size), ifs: make([]Interface, 0, 2*p.size), pool: p}
		p.Allocated.Add(1)
	}
	b.refs.Store(1)
	return b
}

func (p *Pool) put(b *Batch) {
	// No clearing: next() overwrites each record before use, and what a
	// parked record still points to (interface names, its own batch's
	// interface array) is small and alive anyway.
	b.Records = b.Records[:0]
	b.ifs = b.ifs[:0]
	p.mu.Lock()
	p.free = append(p.free, b)
	p.mu.Unlock()
}

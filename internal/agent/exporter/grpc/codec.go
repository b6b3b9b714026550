package grpc

import (
	"sync"
	"unsafe"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// encodedBatch is a FlowBatch already in wire form (flowpb.AppendFlow
// elements), sent as is by passthroughCodec. lend says the exporter keeps
// wire unchanged until gRPC has freed it (an ExportAcked stream's pending
// message, recycled through the lender); else gRPC gets a copy.
type encodedBatch struct {
	wire []byte
	lend bool
}

// passthroughCodec is the export stream's codec (set with ForceCodecV2 on
// that stream only, never registered globally): it sends an *encodedBatch's
// bytes without re-marshalling, and leaves everything else (the
// ExportSummary reply) to the standard proto codec.
//
// gRPC writes a message asynchronously after Send has returned, and keeps
// it for a transparent retry until the stream is committed (grpc-go #3458:
// "the buffer could be read after SendMsg returns"). A message of an
// ExportAcked stream is handed over as it is, not copied: the exporter
// keeps its buffer until the collector acknowledges it anyway, and the
// lender puts it back into use only once gRPC has freed it too (mem.Buffer
// returns its bytes to its pool when its last reference is freed), so the
// kept buffer is the message's only copy. Everything else (the legacy
// Export stream, whose buffers are reused as soon as Send returns, and
// messages under gRPC's pooling threshold, which it frees without telling
// the pool) goes as a copy in a buffer of gRPC's pool, as before.
//
// Its name is "proto": the bytes are protobuf, the content type is the
// standard application/grpc+proto, and the collector (any gRPC server)
// decodes them with its proto codec.
type passthroughCodec struct {
	proto  encoding.CodecV2
	lender *lender
}

func newPassthroughCodec(l *lender) passthroughCodec {
	return passthroughCodec{proto: encoding.GetCodecV2(protocodec.Name), lender: l}
}

func (c passthroughCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*encodedBatch); ok {
		if m.lend && c.lender != nil && !mem.IsBelowBufferPoolingThreshold(cap(m.wire)) {
			if b, ok := c.lender.lend(m.wire); ok {
				return mem.BufferSlice{b}, nil
			}
		}
		return mem.BufferSlice{mem.Copy(m.wire, mem.DefaultBufferPool())}, nil
	}
	return c.proto.Marshal(v)
}

func (c passthroughCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return c.proto.Unmarshal(data, v)
}

func (passthroughCodec) Name() string { return protocodec.Name }

// lender recycles the exporter's message buffers: a buffer is reused only
// when the exporter is done with its message (acknowledged, refused,
// failed) and gRPC holds no reference to it (every mem.Buffer made by lend
// freed). It is the mem.BufferPool of the buffers it lends: gRPC calls Put
// when it frees one, from its own goroutines, hence the mutex (which also
// orders gRPC's last read of the bytes before the exporter's next write).
//
// Bounded whatever gRPC does: held is keyed by address (it keeps no
// buffer alive), and lend copies instead once maxHeld buffers are out (a
// path that never frees would otherwise grow it); spare keeps at most max
// buffers, the rest are left to the garbage collector. A stale address
// (a buffer gRPC dropped without Free, its memory reused) only makes a
// buffer look held: it is not reused, never reused too early.
type lender struct {
	mu    sync.Mutex
	held  map[uintptr]int    // gRPC's live references, by backing array
	spare map[uintptr][]byte // done with by the exporter, still held by gRPC
	free  [][]byte           // ready for reuse
	max   int                // free and spare hold at most this many each
}

// maxHeld bounds the buffers lent at once: the exporter's pending messages
// (MaxUnackedBatches batches, a few messages each) sent up to twice.
func (l *lender) maxHeld() int { return 8 * (l.max + 1) }

func newLender(max int) *lender {
	return &lender{held: map[uintptr]int{}, spare: map[uintptr][]byte{}, max: max + 1}
}

func key(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// lend hands b to gRPC as a Buffer whose Free comes back to Put (false:
// too many out, copy it).
func (l *lender) lend(b []byte) (mem.Buffer, bool) {
	l.mu.Lock()
	k := key(b)
	if l.held[k] == 0 && len(l.held) >= l.maxHeld() {
		l.mu.Unlock()
		return nil, false
	}
	l.held[k]++
	l.mu.Unlock()
	return mem.NewBuffer(&b, l), true
}

// Put is gRPC freeing a lent buffer (mem.BufferPool).
func (l *lender) Put(p *[]byte) {
	k := key(*p)
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.held[k] - 1; n > 0 {
		l.held[k] = n
		return
	}
	delete(l.held, k)
	if b, ok := l.spare[k]; ok {
		delete(l.spare, k)
		l.keep(b)
	}
}

// Get is mem.BufferPool's; gRPC takes no buffer from this pool.
func (l *lender) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

// release is the exporter done with b: reused once gRPC holds none of it.
func (l *lender) release(b []byte) {
	if cap(b) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := key(b); l.held[k] > 0 {
		if len(l.spare) < l.max {
			l.spare[k] = b
		}
		return
	}
	l.keep(b)
}

func (l *lender) keep(b []byte) {
	if len(l.free) < l.max {
		l.free = append(l.free, b)
	}
}

// take is a buffer for the next message (empty, nil when none is free).
func (l *lender) take() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free = l.free[:n-1]
		return b[:0]
	}
	return nil
}

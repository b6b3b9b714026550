package capture

import (
	"sync"
	"unsafe"
)

// packetOverhead is what a queued packet costs beyond its bytes: the
// Packet, and its slot in the queue's slice.
const packetOverhead = int64(unsafe.Sizeof(Packet{}))

// queueCost is what a packet read as a ring record of n bytes (the
// metadata and the packet's bytes: Data is a slice of it) costs queued.
func queueCost(n int) int64 { return int64(n) + packetOverhead }

// QueueCost is what a packet of capLen copied bytes costs in the queue
// between the ring and emit (Config.QueueBytes counts it): its record,
// MetaSize + capLen bytes, and the Packet.
func QueueCost(capLen int) int64 { return queueCost(metaSize + capLen) }

// queue holds the packets between the ring's reader and emit, bounded in
// bytes (maxBytes: their records and overhead, queueCost) and, when
// maxLen > 0, in packets. It allocates as it fills: an idle capture's
// queue holds nothing.
type queue struct {
	mu      sync.Mutex
	items   []Packet
	costs   []int64
	bytes   int64
	closed  bool
	ready   chan struct{}
	maxLen  int
	maxByte int64
}

func newQueue(maxBytes int64, maxLen int) *queue {
	return &queue{ready: make(chan struct{}, 1), maxByte: maxBytes, maxLen: maxLen}
}

// push queues p, of cost bytes; false when the queue cannot take it.
func (q *queue) push(p Packet, cost int64) bool {
	q.mu.Lock()
	if q.bytes+cost > q.maxByte || (q.maxLen > 0 && len(q.items) >= q.maxLen) {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, p)
	q.costs = append(q.costs, cost)
	q.bytes += cost
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// close: pop returns false once the queue is empty.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop waits for the next packet; false once the queue is closed and empty.
func (q *queue) pop() (Packet, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			p := q.items[0]
			q.items[0] = Packet{} // its bytes are the consumer's now
			q.items = q.items[1:]
			q.bytes -= q.costs[0]
			q.costs = q.costs[1:]
			if len(q.items) == 0 { // start the slices over: their arrays go
				q.items, q.costs = nil, nil
			}
			q.mu.Unlock()
			return p, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return Packet{}, false
		}
		<-q.ready
	}
}

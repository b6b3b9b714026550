package dns

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/pkg/flow"
)

// AnswerRingBytes is the size of ring dns_answers when the names are on:
// 1 MiB holds about 2,000 answers (520-byte records), the answers of one
// eviction period (the agent drains it at each eviction, Sweep); an
// answer that finds it full is counted, result "lost".
const AnswerRingBytes = 1 << 20

// maxAnswers bounds the resource records read from one answer.
const maxAnswers = 64

// Names are the addresses' DNS names: the A and AAAA records of the
// answers the TC programs handed on (ring dns_answers), each address
// mapped to its answer's question name until the record's TTL runs out,
// at most max addresses (when full, the address whose name expires first
// goes, counted). Used by the evictor's goroutine only (Sweep, Annotate);
// the metrics read its atomics.
type Names struct {
	max     int
	byAddr  map[netip.Addr]*nameEntry
	byTime  expiryHeap
	lastRun time.Time // the previous drain: entries expired before it serve no record any more

	entries   atomic.Int64
	evictions atomic.Uint64 // addresses pushed out by the cap
	named     atomic.Uint64 // answers read
	unparsed  atomic.Uint64 // answers whose header or question could not be read

	ring *ringbuf.Reader
	rec  ringbuf.Record
}

type nameEntry struct {
	addr    netip.Addr
	name    string
	expires time.Time
	index   int // in byTime
}

// NewNames returns a cache of at most max addresses.
func NewNames(max int) *Names {
	return &Names{max: max, byAddr: map[netip.Addr]*nameEntry{}}
}

// Len is the number of addresses with a name.
func (n *Names) Len() int { return int(n.entries.Load()) }

// Stats are the answers read and unparsed, and the addresses pushed out by
// the cap, so far.
func (n *Names) Stats() (read, unparsed, evictions uint64) {
	return n.named.Load(), n.unparsed.Load(), n.evictions.Load()
}

// Lookup is a's name and when it expires ("" when a has none).
func (n *Names) Lookup(a netip.Addr) (string, time.Time) {
	if e := n.byAddr[a]; e != nil {
		return e.name, e.expires
	}
	return "", time.Time{}
}

// Annotate sets the record's src_dns_name and dst_dns_name from the
// cache: an address's name applies while it has not expired before the
// record's start.
func (n *Names) Annotate(r *flow.Record) {
	if len(n.byAddr) == 0 {
		return
	}
	if e := n.byAddr[r.SrcAddr]; e != nil && e.expires.After(r.StartTime) {
		r.SrcDNSName = e.name
	}
	if e := n.byAddr[r.DstAddr]; e != nil && e.expires.After(r.StartTime) {
		r.DstDNSName = e.name
	}
}

// drain reads every answer waiting on ring m (opening the reader the first
// time) into the cache, at now; then it forgets the names that expired
// before the previous drain (the records of this eviction started after
// it).
func (n *Names) drain(m *ebpf.Map, now time.Time) error {
	if n.ring == nil {
		rd, err := ringbuf.NewReader(m)
		if err != nil {
			return fmt.Errorf("open the ring of DNS answers: %w", err)
		}
		n.ring = rd
	}
	n.ring.SetDeadline(now) // what is there, without waiting
	for {
		err := n.ring.ReadInto(&n.rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return fmt.Errorf("read the ring of DNS answers: %w", err)
		}
		raw := n.rec.RawSample
		if len(raw) < 4 {
			n.unparsed.Add(1)
			continue
		}
		l := int(binary.NativeEndian.Uint32(raw))
		if l > len(raw)-4 || l > datapath.DNSAnswerMax {
			n.unparsed.Add(1)
			continue
		}
		n.Add(raw[4:4+l], now)
	}
	if !n.lastRun.IsZero() {
		n.expire(n.lastRun)
	}
	n.lastRun = now
	return nil
}

// close closes the ring's reader.
func (n *Names) close() {
	if n.ring != nil {
		n.ring.Close()
		n.ring = nil
	}
}

// Add reads one DNS answer (at most its first DNSAnswerMax bytes: the
// resource records cut short are left out) and maps the addresses of its
// A and AAAA records (class IN) to the question's name, from now until
// their TTL runs out; a TTL of 0 maps nothing. An answer whose header or
// question cannot be read, or that is not a response, counts as
// unparsed.
func (n *Names) Add(msg []byte, now time.Time) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || !h.Response {
		n.unparsed.Add(1)
		return
	}
	q, err := p.Question()
	if err != nil {
		n.unparsed.Add(1)
		return
	}
	n.named.Add(1)
	if h.RCode != dnsmessage.RCodeSuccess || q.Class != dnsmessage.ClassINET {
		return
	}
	name := strings.TrimSuffix(q.Name.String(), ".")
	if name == "" || len(name) > flow.MaxDNSName {
		return
	}
	if err := p.SkipAllQuestions(); err != nil {
		return
	}
	for range maxAnswers {
		ah, err := p.AnswerHeader()
		if err != nil {
			return // no more, or cut short
		}
		a, ok, err := answerAddr(&p, ah)
		if err != nil {
			return
		}
		if ok && ah.TTL > 0 {
			n.put(a, name, now.Add(time.Duration(ah.TTL)*time.Second))
		}
	}
}

// answerAddr reads the resource record whose header is h: its address
// for an A or AAAA record of class IN, else nothing (skipped).
func answerAddr(p *dnsmessage.Parser, h dnsmessage.ResourceHeader) (netip.Addr, bool, error) {
	if h.Class == dnsmessage.ClassINET {
		switch h.Type {
		case dnsmessage.TypeA:
			r, err := p.AResource()
			return netip.AddrFrom4(r.A), err == nil, err
		case dnsmessage.TypeAAAA:
			r, err := p.AAAAResource()
			return netip.AddrFrom16(r.AAAA), err == nil, err
		}
	}
	return netip.Addr{}, false, p.SkipAnswer()
}

// put maps a to name until expires, pushing out the address expiring
// first when the cache is full.
func (n *Names) put(a netip.Addr, name string, expires time.Time) {
	if n.max <= 0 {
		return
	}
	if e := n.byAddr[a]; e != nil {
		e.name, e.expires = name, expires
		heap.Fix(&n.byTime, e.index)
		return
	}
	if len(n.byAddr) >= n.max {
		old := heap.Pop(&n.byTime).(*nameEntry)
		delete(n.byAddr, old.addr)
		n.evictions.Add(1)
	}
	e := &nameEntry{addr: a, name: name, expires: expires}
	heap.Push(&n.byTime, e)
	n.byAddr[a] = e
	n.entries.Store(int64(len(n.byAddr)))
}

// expire forgets the names that expired before t.
func (n *Names) expire(t time.Time) {
	for len(n.byTime) > 0 && n.byTime[0].expires.Before(t) {
		e := heap.Pop(&n.byTime).(*nameEntry)
		delete(n.byAddr, e.addr)
	}
	n.entries.Store(int64(len(n.byAddr)))
}

// expiryHeap orders the entries by expiry, the first to expire first.
type expiryHeap []*nameEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*nameEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

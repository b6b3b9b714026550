package capture

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/ifname"
)

// Defaults of Config: the sizes the agent's memory budget gives a capture
// under the operator's default memory limit (512 MiB; agent.MemoryBudget).
const (
	DefaultRingBytes  = 2 << 20
	DefaultQueueBytes = 4 << 20
	// DefaultMaxSnaplen applies when Config.MaxSnaplen is 0 (the agent
	// passes --capture-max-snaplen).
	DefaultMaxSnaplen = 128
)

// MaxConcurrent is how many captures an agent runs at once (each has its
// own program instances, ring and, on clsact, filter priority).
const MaxConcurrent = 8

// Bounds of a Filter's lists, those of bpf/capture.h (the filter is a
// load-time constant of fixed size).
const (
	MaxCIDRs     = 16
	MaxPorts     = 16
	MaxProtocols = 8
	MaxTCPFlags  = 8
)

// Reasons a matching packet is not captured (Result.NotCaptured and the
// reason label of flowlens_agent_capture_lost_packets_total).
const (
	LostRingFull = "ring_full"
	LostConsumer = "consumer"
)

// Capturer runs captures on the agent's watched interfaces. It holds
// nothing in the kernel between captures.
type Capturer struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	slots [MaxConcurrent]bool

	// Totals for the metrics (metrics.go).
	running        atomic.Int64
	packets, bytes atomic.Uint64
	ringFull, cons atomic.Uint64
	// kernelBytes: the rings and scratch values of the running captures
	// (under mu).
	kernelBytes int64
}

// metaSize is sizeof(struct cap_meta), what precedes each packet's bytes.
const metaSize = int(unsafe.Sizeof(captureCapMeta{}))

// namespace is one network namespace a capture hooks, by the index its
// program instances carry (cap_ns).
type namespace struct {
	name   string
	cookie uint64
}

type instanceKey struct {
	ns         int
	egress, l3 bool
}

type ifKey struct {
	ns      int
	ifindex uint32
}

func (c *Capturer) takeSlot() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, used := range c.slots {
		if !used {
			c.slots[i] = true
			return i, true
		}
	}
	return 0, false
}

func (c *Capturer) freeSlot(i int) {
	c.mu.Lock()
	c.slots[i] = false
	c.mu.Unlock()
}

// compile turns a Filter into the program's load-time filter.
func compile(f Filter) (captureCapFilter, error) {
	var k captureCapFilter
	if len(f.CIDRs) > MaxCIDRs || len(f.SrcCIDRs) > MaxCIDRs || len(f.DstCIDRs) > MaxCIDRs || len(f.PeerCIDRs) > MaxCIDRs {
		return k, fmt.Errorf("capture filter: at most %d CIDRs in each of any, source, destination and peer", MaxCIDRs)
	}
	if len(f.CIDRs) == 0 {
		// PeerCIDRs alone is CIDRs (either end); the kernel's pair
		// match needs both lists.
		f.CIDRs, f.PeerCIDRs = f.PeerCIDRs, nil
	}
	if len(f.Ports) > MaxPorts || len(f.SrcPorts) > MaxPorts || len(f.DstPorts) > MaxPorts {
		return k, fmt.Errorf("capture filter: at most %d ports in each of any, source and destination", MaxPorts)
	}
	if len(f.Protocols) > MaxProtocols {
		return k, fmt.Errorf("capture filter: at most %d protocols", MaxProtocols)
	}
	if len(f.TCPFlags) > MaxTCPFlags {
		return k, fmt.Errorf("capture filter: at most %d TCP flag masks", MaxTCPFlags)
	}
	for i, p := range f.CIDRs {
		k.Cidrs[i].Addr, k.Cidrs[i].Mask = prefixWords(p)
	}
	for i, p := range f.PeerCIDRs {
		k.Peer[i].Addr, k.Peer[i].Mask = prefixWords(p)
	}
	for i, p := range f.SrcCIDRs {
		k.Src[i].Addr, k.Src[i].Mask = prefixWords(p)
	}
	for i, p := range f.DstCIDRs {
		k.Dst[i].Addr, k.Dst[i].Mask = prefixWords(p)
	}
	copy(k.Ports[:], f.Ports)
	copy(k.Sports[:], f.SrcPorts)
	copy(k.Dports[:], f.DstPorts)
	copy(k.Protos[:], f.Protocols)
	copy(k.Flags[:], f.TCPFlags)
	k.N_cidrs, k.N_src, k.N_dst = uint32(len(f.CIDRs)), uint32(len(f.SrcCIDRs)), uint32(len(f.DstCIDRs))
	k.N_peer = uint32(len(f.PeerCIDRs))
	k.N_ports, k.N_sports, k.N_dports = uint32(len(f.Ports)), uint32(len(f.SrcPorts)), uint32(len(f.DstPorts))
	k.N_protos, k.N_flags = uint32(len(f.Protocols)), uint32(len(f.TCPFlags))
	if k.N_cidrs+k.N_src+k.N_dst+k.N_ports+k.N_sports+k.N_dports+k.N_protos+k.N_flags > 0 {
		k.NeedsIp = 1
	}
	return k, nil
}

// prefixWords is a prefix as bpf/capture.h's cap_prefix: IPv4 mapped into
// IPv6, the masked address and the mask as four words in network order
// (their bytes as in the packet, read in the host's order).
func prefixWords(p netip.Prefix) (addr, mask [4]uint32) {
	p = p.Masked()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	a := p.Addr().As16()
	var m [16]byte
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	for i := range 4 {
		addr[i] = binary.NativeEndian.Uint32(a[4*i:])
		mask[i] = binary.NativeEndian.Uint32(m[4*i:])
	}
	return addr, mask
}

// session is one running capture's kernel objects.
type session struct {
	ring, scratch, counts *ebpf.Map
	progs                 map[instanceKey]*ebpf.Program
	hooks                 []*datapath.Beside
	rd                    *ringbuf.Reader
	wake                  uint64 // cap_wake: unread bytes that wake the reader
}

// Memory is what one capture with snaplen takes while it runs: in the
// kernel, its ring and its scratch values (one per possible CPU, a
// record's metadata and snaplen bytes), charged to the agent's memory
// cgroup; in the Go heap, at most queue bytes of packets waiting for emit.
func (c *Capturer) Memory(snaplen uint32) (ring, scratch, queue int64) {
	return ringSize(c.cfg.RingBytes, snaplen), scratchSize(snaplen), queueSize(c.cfg.QueueBytes, snaplen)
}

// ringSize is the ring's size: want rounded up to a power-of-two number of
// pages (what BPF_MAP_TYPE_RINGBUF takes), and room for at least 2 records
// of the snaplen (a record has an 8-byte header).
func ringSize(want int, snaplen uint32) int64 {
	need := max(int64(want), 2*(8+int64(metaSize)+int64(snaplen)), int64(os.Getpagesize()))
	n := int64(os.Getpagesize())
	for n < need {
		n *= 2
	}
	return n
}

// scratchSize is the scratch map's size: a record per possible CPU.
func scratchSize(snaplen uint32) int64 {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		cpus = 1
	}
	return int64(cpus) * int64(scratchValue(snaplen))
}

func scratchValue(snaplen uint32) uint32 { return (uint32(metaSize) + snaplen + 7) &^ 7 }

// queueSize is the queue's bound in bytes: want, and at least one packet
// of the snaplen.
func queueSize(want int64, snaplen uint32) int64 {
	return max(want, queueCost(metaSize+int(snaplen)))
}

// newSession creates a capture's maps: its ring, scratch values and
// counters.
func newSession(spec *ebpf.CollectionSpec, ringBytes int64, snaplen uint32) (_ *session, err error) {
	s := &session{progs: map[instanceKey]*ebpf.Program{}, wake: uint64(max(ringBytes/8, 1))}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	rs := spec.Maps[captureMapCapRing].Copy()
	rs.MaxEntries = uint32(ringBytes)
	if s.ring, err = ebpf.NewMap(rs); err != nil {
		return nil, fmt.Errorf("capture: ring of %d bytes: %w", ringBytes, err)
	}
	ss := spec.Maps[captureMapCapScratch].Copy()
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	ss.MaxEntries, ss.ValueSize = uint32(cpus), scratchValue(snaplen)
	if s.scratch, err = ebpf.NewMap(ss); err != nil {
		return nil, fmt.Errorf("capture: scratch: %w", err)
	}
	if s.counts, err = ebpf.NewMap(spec.Maps[captureMapCapCounts]); err != nil {
		return nil, fmt.Errorf("capture: counters: %w", err)
	}
	return s, nil
}

func (s *session) detach() error {
	var errs []error
	for _, h := range s.hooks {
		if err := h.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.hooks = nil
	return errors.Join(errs...)
}

func (s *session) close() {
	s.detach()
	if s.rd != nil {
		s.rd.Close()
	}
	for _, p := range s.progs {
		if p != nil {
			p.Close()
		}
	}
	for _, m := range []*ebpf.Map{s.ring, s.scratch, s.counts} {
		if m != nil {
			m.Close()
		}
	}
}

// kernelCounts sums the per-CPU counters: packets matched, and those the
// ring could not take.
// ring_full is read first: a program counts a packet matched before it
// may count it ring_full, so ringFull <= matched even while they run.
func (s *session) kernelCounts() (matched, ringFull uint64, err error) {
	for _, c := range []struct {
		slot captureCapCount
		dst  *uint64
	}{{captureCapCountCAP_COUNT_RING_FULL, &ringFull}, {captureCapCountCAP_COUNT_MATCHED, &matched}} {
		var per []uint64
		if err := s.counts.Lookup(uint32(c.slot), &per); err != nil {
			return 0, 0, fmt.Errorf("read the capture counters: %w", err)
		}
		for _, v := range per {
			*c.dst += v
		}
	}
	return matched, ringFull, nil
}

func (c *Capturer) run(ctx context.Context, f Filter, l Limits, emit func(Packet) error) (res Result, err error) {
	res.NotCaptured = map[string]uint64{}
	if !c.cfg.Enabled {
		return res, ErrDisabled
	}
	if c.cfg.Datapath == nil {
		return res, errors.New("capture: no datapath")
	}
	maxSnap := c.cfg.MaxSnaplen
	if maxSnap == 0 {
		maxSnap = DefaultMaxSnaplen
	}
	res.Snaplen = l.Snaplen
	if l.Snaplen == 0 || l.Snaplen > maxSnap {
		res.Snaplen, res.SnaplenClamped = maxSnap, l.Snaplen > maxSnap
	}
	conf, err := compile(f)
	if err != nil {
		return res, err
	}
	names, err := ifname.Compile(f.Interfaces)
	if err != nil {
		return res, fmt.Errorf("capture filter: interfaces: %w", err)
	}

	// The hooks: every watched interface the filter names, in the
	// directions it asks; matching interfaces and directions here costs
	// nothing per packet.
	if len(matching(c.cfg.Datapath.AttachedInterfaces(), f, names)) == 0 {
		return res, ErrNoInterface
	}

	slot, ok := c.takeSlot()
	if !ok {
		return res, fmt.Errorf("capture: %d captures are running already on this agent, the most it runs at once", MaxConcurrent)
	}
	defer c.freeSlot(slot)

	spec, err := loadCapture()
	if err != nil {
		return res, err
	}
	ringBytes, scratchBytes, queueBytes := c.Memory(res.Snaplen)
	s, err := newSession(spec, ringBytes, res.Snaplen)
	if err != nil {
		return res, err
	}
	defer s.close()
	// The ring and scratch values are the agent's memory (its cgroup's)
	// until s.close.
	c.charge(ringBytes + scratchBytes)
	defer c.charge(-(ringBytes + scratchBytes))
	if s.rd, err = ringbuf.NewReader(s.ring); err != nil {
		return res, fmt.Errorf("capture: ring reader: %w", err)
	}

	// Wall clock of the programs' CLOCK_MONOTONIC stamps.
	var mono unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return res, err
	}
	offset := time.Now().UnixNano() - mono.Nano()

	// Interfaces the agent attaches from now on are hooked as they come
	// (watching before listing: none falls between). An interface that
	// went away since the listing is skipped (logged); the capture fails
	// only when it can attach nowhere. stopWatch runs before the deferred
	// s.close: no hook is added once the capture detaches.
	hs := &hookSet{c: c, f: f, names: names, conf: conf, snaplen: res.Snaplen, slot: slot, spec: spec, s: s,
		nsIndex: map[string]int{}, ifNames: map[ifKey]datapath.AttachedInterface{}}
	stopWatch := c.cfg.Datapath.OnAttach(hs.later)
	watching := true
	defer func() {
		if watching {
			stopWatch()
		}
	}()
	hooked := 0
	for _, it := range matching(c.cfg.Datapath.AttachedInterfaces(), f, names) {
		n, err := hs.add(it)
		if err != nil {
			return res, err
		}
		hooked += n
	}
	hs.mu.RLock()
	nss, attachErr := len(hs.nss), hs.attachErr
	hs.mu.RUnlock()
	if hooked == 0 {
		return res, fmt.Errorf("capture: %w", attachErr)
	}
	// Running once every hook is attached, until they are all detached
	// (s.detach below, before this defer runs).
	c.running.Add(1)
	defer c.running.Add(-1)
	c.log.Info("capture started", "hooks", hooked, "namespaces", nss, "snaplen", res.Snaplen,
		"snaplen_clamped", res.SnaplenClamped, "max_packets", l.MaxPackets, "max_bytes", l.MaxBytes, "duration", l.Duration)
	defer func() {
		c.log.Info("capture ended", "reason", res.Reason, "packets", res.Packets, "bytes", res.Bytes,
			"not_captured", res.NotCaptured, "error", err)
	}()

	stop := make(chan string, 3)
	stopWith := func(reason string) {
		select {
		case stop <- reason:
		default:
		}
	}
	queue := newQueue(queueBytes, c.cfg.QueueLen)

	// The reader: ring -> queue, within the limits. It reads every record
	// until the flush (seen), also after a limit stopped the capture, so
	// that the drain at the end knows when the ring is empty.
	var seen atomic.Uint64
	var consumer uint64
	readDone := make(chan error, 1)
	go func() {
		defer queue.close()
		var accepted, acceptedBytes uint64
		stopped := false
		s.rd.SetDeadline(time.Now().Add(readLatency))
		for {
			rec, err := s.rd.Read()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// The records below the watermark were read: again in readLatency.
				s.rd.SetDeadline(time.Now().Add(readLatency))
				continue
			}
			if errors.Is(err, ringbuf.ErrFlushed) || errors.Is(err, os.ErrClosed) || errors.Is(err, ringbuf.ErrClosed) {
				readDone <- nil
				return
			}
			if err != nil {
				readDone <- fmt.Errorf("capture: read the ring: %w", err)
				stopWith("error")
				return
			}
			if len(rec.RawSample) < metaSize {
				continue
			}
			seen.Add(1)
			if stopped {
				continue
			}
			raw := rec.RawSample
			capLen := binary.NativeEndian.Uint32(raw[24:])
			if int(capLen) > len(raw)-metaSize {
				capLen = uint32(len(raw) - metaSize)
			}
			ns := int(binary.NativeEndian.Uint64(raw[8:]))
			ifindex := binary.NativeEndian.Uint32(raw[16:])
			p := Packet{
				Time:      time.Unix(0, int64(binary.NativeEndian.Uint64(raw[0:]))+offset),
				Ifindex:   ifindex,
				Direction: Direction(binary.NativeEndian.Uint32(raw[28:])),
				WireLen:   binary.NativeEndian.Uint32(raw[20:]),
				Data:      raw[metaSize : metaSize+int(capLen) : metaSize+int(capLen)],
			}
			if n, it, err := hs.lookup(ns, ifindex); err == nil {
				p.Netns, p.NetnsID = n.name, n.cookie
				p.Interface, p.RawIP = it.Name, it.L3
			}
			if l.MaxBytes > 0 && acceptedBytes+uint64(capLen) > l.MaxBytes {
				stopped = true
				stopWith("max_bytes")
				continue
			}
			if !queue.push(p, queueCost(len(raw))) {
				consumer++
				c.cons.Add(1)
				continue
			}
			accepted++
			acceptedBytes += uint64(capLen)
			if l.MaxPackets > 0 && accepted >= l.MaxPackets {
				stopped = true
				stopWith("max_packets")
			} else if l.MaxBytes > 0 && acceptedBytes >= l.MaxBytes {
				stopped = true
				stopWith("max_bytes")
			}
		}
	}()

	// The emitter: queue -> emit. After an emit error the rest of the
	// queue is "consumer": not handed over.
	var emitErr error
	var unsent uint64
	emitDone := make(chan struct{})
	go func() {
		defer close(emitDone)
		for {
			p, ok := queue.pop()
			if !ok {
				return
			}
			if emitErr != nil {
				unsent++
				continue
			}
			if err := emit(p); err != nil {
				emitErr = err
				unsent++
				stopWith("error")
				continue
			}
			res.Packets++
			res.Bytes += uint64(len(p.Data))
			c.packets.Add(1)
			c.bytes.Add(uint64(len(p.Data)))
		}
	}()

	var timer <-chan time.Time
	if l.Duration > 0 {
		t := time.NewTimer(l.Duration)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		res.Reason = "canceled"
	case <-timer:
		res.Reason = "duration"
	case res.Reason = <-stop:
	}

	// Detach first: no new sample. Then drain what the programs wrote
	// (matched - ring_full; a program still running on another CPU may
	// not have written its sample yet), flush the reader and wait for it.
	stopWatch()
	watching = false
	detachErr := s.detach()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		matched, full, err := s.kernelCounts()
		if err != nil || seen.Load() >= matched-full || time.Now().After(deadline) {
			break
		}
	}
	s.rd.Flush()
	readErr := <-readDone
	if readErr != nil {
		s.rd.Close() // the reader stopped early: nothing more to read
	}
	<-emitDone
	_, full, countErr := s.kernelCounts()
	c.ringFull.Add(full)
	c.cons.Add(unsent)
	if full > 0 {
		res.NotCaptured[LostRingFull] = full
	}
	if consumer+unsent > 0 {
		res.NotCaptured[LostConsumer] = consumer + unsent
	}
	// Once ctx has ended, emit failing (the requester is gone) is how the
	// capture ends, not an error of it.
	if emitErr != nil && res.Reason == "canceled" && ctx.Err() != nil {
		emitErr = nil
	}
	switch {
	case emitErr != nil:
		return res, emitErr
	case readErr != nil:
		return res, readErr
	}
	if res.Reason == "error" {
		res.Reason = "canceled"
	}
	return res, errors.Join(detachErr, countErr)
}

// readLatency bounds how long a copied packet waits in a ring that is
// below its watermark.
const readLatency = 100 * time.Millisecond

// charge adds n to the kernel bytes of the running captures and tells
// Config.OnKernelBytes the total.
func (c *Capturer) charge(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kernelBytes += n
	if c.cfg.OnKernelBytes != nil {
		c.cfg.OnKernelBytes(c.kernelBytes)
	}
}

// loadInstance loads one program instance: the filter, snaplen, namespace
// index, direction and link type as load-time constants, the capture's
// ring and counters as its maps.
func loadInstance(spec *ebpf.CollectionSpec, k instanceKey, conf captureCapFilter, snaplen uint32, s *session) (*ebpf.Program, error) {
	sp := spec.Copy()
	dir, l2 := uint32(Ingress), uint32(14)
	if k.egress {
		dir = uint32(Egress)
	}
	if k.l3 {
		l2 = 0
	}
	for name, v := range map[string]any{captureVarCapConf: conf, captureVarCapNs: uint64(k.ns),
		captureVarCapDir: dir, captureVarCapSnaplen: snaplen, captureVarCapL2Len: l2, captureVarCapWake: s.wake} {
		if err := sp.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("capture: set %s: %w", name, err)
		}
	}
	// The session's maps were sized at run time (newSession).
	sp.Maps[captureMapCapRing].MaxEntries = s.ring.MaxEntries()
	sp.Maps[captureMapCapScratch].MaxEntries = s.scratch.MaxEntries()
	sp.Maps[captureMapCapScratch].ValueSize = s.scratch.ValueSize()
	coll, err := ebpf.NewCollectionWithOptions(sp, ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{captureMapCapRing: s.ring, captureMapCapScratch: s.scratch, captureMapCapCounts: s.counts},
	})
	if err != nil {
		return nil, fmt.Errorf("capture: load the program: %w", err)
	}
	defer coll.Close()
	return coll.DetachProgram(captureProgFlowlensCapture), nil
}

package capture_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/capture"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// The tests run the agent's real code (agenttest) on two lab namespaces
// joined by a veth, a (10.99.0.1, veth-a) and b (10.99.0.2, veth-b), and
// capture with a Capturer over its datapath, as the agent does.

// lab is an agent watching a pair, and a Capturer over its datapath.
type lab struct {
	p *agenttest.Pair
	h *agenttest.Harness
	c *capture.Capturer
}

func newLab(t *testing.T, cfg capture.Config, args ...string) *lab {
	netlab.Require(t)
	p := agenttest.NewPair(t)
	h := agenttest.Start(t, 2, agent.Options{}, append([]string{p.NetnsArg()}, args...)...)
	cfg.Enabled, cfg.Datapath = true, h.A.DP
	if cfg.MaxSnaplen == 0 {
		cfg.MaxSnaplen = 128
	}
	return &lab{p: p, h: h, c: capture.New(cfg)}
}

// run is one capture running in the background.
type run struct {
	mu     sync.Mutex
	pkts   []capture.Packet
	cancel context.CancelFunc
	done   chan struct{}
	res    capture.Result
	err    error
}

// start runs a capture and waits until it is attached (Running).
func (l *lab) start(t *testing.T, f capture.Filter, lim capture.Limits, emit func(capture.Packet) error) *run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cancel: cancel, done: make(chan struct{})}
	if emit == nil {
		emit = func(p capture.Packet) error {
			r.mu.Lock()
			r.pkts = append(r.pkts, p)
			r.mu.Unlock()
			return nil
		}
	}
	before := l.c.Running()
	go func() {
		defer close(r.done)
		r.res, r.err = l.c.Run(ctx, f, lim, emit)
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	for deadline := time.Now().Add(30 * time.Second); l.c.Running() == before; time.Sleep(10 * time.Millisecond) {
		select {
		case <-r.done:
			t.Fatalf("capture ended before it ran: %v", r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("capture not running after 30s")
		}
	}
	return r
}

// stop cancels the capture and returns how it ended.
func (r *run) stop(t *testing.T) (capture.Result, []capture.Packet) {
	t.Helper()
	r.cancel()
	return r.wait(t)
}

func (r *run) wait(t *testing.T) (capture.Result, []capture.Packet) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatal("capture did not end in 60s")
	}
	if r.err != nil {
		t.Fatalf("capture: %v", r.err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.res, r.pkts
}

// sendSized sends n datagrams from src to dst, the i-th with a payload of
// base+i bytes, and returns when b's socket has read them all (so every
// hook on the way ran).
func sendSized(t *testing.T, l *lab, src, dst string, n, base int) {
	t.Helper()
	sendSizedNs(t, l.p.A, l.p.B, src, dst, n, base)
}

// sendSizedNs is sendSized from namespace from to namespace to.
func sendSizedNs(t *testing.T, from, to *netlab.Netns, src, dst string, n, base int) {
	t.Helper()
	c := agenttest.MustListen(t, to, dst)
	var read atomic.Int64 // datagrams b's socket read so far
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, 65536)
		k := 0
		for k < n {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, _, err := c.ReadFromUDP(buf); err != nil {
				break
			}
			k++
			read.Store(int64(k))
		}
		got <- k
	}()
	// At most inFlight datagrams wait in b's socket: a loaded host's
	// reader falls behind, and a full socket buffer drops datagrams after
	// every hook saw them (the count below would then be short).
	const inFlight = 32
	for i := range n {
		for deadline := time.Now().Add(30 * time.Second); int64(i)-read.Load() >= inFlight && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if err := netlab.UDPSend(from, src, dst, make([]byte, base+i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if k := <-got; k != n {
		t.Fatalf("%s -> %s: b read %d datagrams, want %d", src, dst, k, n)
	}
}

// hookKey is where a packet was copied.
type hookKey struct {
	iface, netns string
	dir          capture.Direction
}

// udp4 parses the copied bytes of an Ethernet, IPv4, UDP packet.
func udp4(t *testing.T, d []byte) (src, dst netip.AddrPort) {
	t.Helper()
	if len(d) < 42 || binary.BigEndian.Uint16(d[12:]) != 0x0800 || d[23] != 17 {
		t.Fatalf("not an IPv4 UDP frame: % x", d)
	}
	s, _ := netip.AddrFromSlice(d[26:30])
	ds, _ := netip.AddrFromSlice(d[30:34])
	return netip.AddrPortFrom(s, binary.BigEndian.Uint16(d[34:])), netip.AddrPortFrom(ds, binary.BigEndian.Uint16(d[36:]))
}

// TestCaptureUDP: 200 datagrams of known sizes match (a:5000 -> b:7001,
// UDP), others do not (another destination port, the other direction's
// source); each matching datagram is copied once at veth-a's egress and
// once at veth-b's ingress, truncated to the snaplen, with its wire length,
// addresses, ports and interfaces.
func TestCaptureUDP(t *testing.T) {
	l := newLab(t, capture.Config{})
	const n, base, snaplen = 200, 10, 64
	f := capture.Filter{
		SrcCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.99.0.1/32")},
		DstPorts:  []uint16{7001},
		Protocols: []uint8{17},
	}
	begin := time.Now()
	r := l.start(t, f, capture.Limits{Snaplen: snaplen}, nil)
	sendSized(t, l, "10.99.0.1:5001", "10.99.0.2:7002", 30, 100) // wrong port
	sendSized(t, l, "10.99.0.1:5000", "10.99.0.2:7001", n, base)
	if err := netlab.UDPSend(l.p.B, "10.99.0.2:7009", "10.99.0.1:5000", []byte("back"), 20); err != nil { // wrong source
		t.Fatal(err)
	}
	sendSized(t, l, "10.99.0.1:5002", "10.99.0.2:7003", 30, 100) // wrong port, after the rest
	res, pkts := r.stop(t)
	end := time.Now()

	t.Logf("result %+v, %d packets", res, len(pkts))
	if res.Packets != 2*n || len(pkts) != 2*n || len(res.NotCaptured) != 0 || res.Reason != "canceled" {
		t.Fatalf("result %+v with %d packets, want %d packets, nothing lost, reason canceled", res, len(pkts), 2*n)
	}
	if res.Snaplen != snaplen || res.SnaplenClamped {
		t.Errorf("snaplen %d clamped %v, want %d not clamped", res.Snaplen, res.SnaplenClamped, snaplen)
	}
	cookies := map[string]uint64{}
	for _, ns := range []*netlab.Netns{l.p.A, l.p.B} {
		c, err := ifaces.NetnsCookie(ns.Path)
		if err != nil {
			t.Fatal(err)
		}
		cookies[ns.Name] = c
	}
	want := map[hookKey]bool{{"veth-a", l.p.A.Name, capture.Egress}: true, {"veth-b", l.p.B.Name, capture.Ingress}: true}
	sizes := map[hookKey]map[uint32]int{}
	var bytes uint64
	for _, p := range pkts {
		k := hookKey{p.Interface, p.Netns, p.Direction}
		if !want[k] {
			t.Fatalf("packet on %+v, want veth-a egress (a) or veth-b ingress (b)", k)
		}
		if p.NetnsID != cookies[p.Netns] || p.Ifindex == 0 {
			t.Errorf("%+v: netns id %d ifindex %d, want cookie %d", k, p.NetnsID, p.Ifindex, cookies[p.Netns])
		}
		src, dst := udp4(t, p.Data)
		if src.String() != "10.99.0.1:5000" || dst.String() != "10.99.0.2:7001" {
			t.Fatalf("%+v: %v -> %v, want 10.99.0.1:5000 -> 10.99.0.2:7001", k, src, dst)
		}
		if p.WireLen < 42+base || p.WireLen >= 42+base+n {
			t.Fatalf("%+v: wire length %d, want %d..%d", k, p.WireLen, 42+base, 42+base+n-1)
		}
		if len(p.Data) != int(min(p.WireLen, snaplen)) {
			t.Errorf("%+v: %d bytes copied of %d, want %d", k, len(p.Data), p.WireLen, min(p.WireLen, snaplen))
		}
		if ipLen := binary.BigEndian.Uint16(p.Data[16:]); uint32(ipLen)+14 != p.WireLen {
			t.Errorf("%+v: IP total length %d, wire length %d", k, ipLen, p.WireLen)
		}
		if p.Time.Before(begin) || p.Time.After(end) {
			t.Errorf("%+v: time %v outside the capture's %v .. %v", k, p.Time, begin, end)
		}
		if sizes[k] == nil {
			sizes[k] = map[uint32]int{}
		}
		sizes[k][p.WireLen]++
		bytes += uint64(len(p.Data))
	}
	if res.Bytes != bytes {
		t.Errorf("result bytes %d, packets carry %d", res.Bytes, bytes)
	}
	for k := range want {
		if len(sizes[k]) != n {
			t.Errorf("%+v: %d distinct datagrams, want %d", k, len(sizes[k]), n)
		}
		for size, c := range sizes[k] {
			if c != 1 {
				t.Errorf("%+v: datagram of %d bytes copied %d times", k, size, c)
			}
		}
	}
	fams := promtest.Gather(t, l.c)
	promtest.Expect(t, fams, 0, "flowlens_agent_captures_running")
	promtest.Expect(t, fams, 2*n, "flowlens_agent_capture_packets_total")
	promtest.Expect(t, fams, float64(bytes), "flowlens_agent_capture_bytes_total")
	promtest.Expect(t, fams, 0, "flowlens_agent_capture_lost_packets_total", "reason=ring_full")
}

// tcxPrograms counts the programs on an interface's tcx hooks.
func tcxPrograms(t *testing.T, ns *netlab.Netns, name string) (ingress, egress int) {
	t.Helper()
	err := ns.Do(func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		for _, h := range []struct {
			typ ebpf.AttachType
			n   *int
		}{{ebpf.AttachTCXIngress, &ingress}, {ebpf.AttachTCXEgress, &egress}} {
			r, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: h.typ})
			if err != nil {
				return err
			}
			*h.n = len(r.Programs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ingress, egress
}

// TestCaptureDetaches: while a capture runs, its program is on the hooks it
// asked for (egress only, veth-a only: one tcx program more there, none on
// veth-b); cancelling it removes it and captures_running returns to 0.
func TestCaptureDetaches(t *testing.T) {
	l := newLab(t, capture.Config{})
	if i, e := tcxPrograms(t, l.p.A, "veth-a"); i != 1 || e != 1 {
		t.Skipf("not attached with tcx (%d ingress, %d egress programs on veth-a): TestCaptureDetachesClsact covers it", i, e)
	}
	r := l.start(t, capture.Filter{Interfaces: []string{"veth-a"}, Direction: capture.Egress}, capture.Limits{}, nil)
	ia, ea := tcxPrograms(t, l.p.A, "veth-a")
	ib, eb := tcxPrograms(t, l.p.B, "veth-b")
	if ia != 1 || ea != 2 || ib != 1 || eb != 1 {
		t.Errorf("while capturing: veth-a %d ingress %d egress, veth-b %d/%d programs; want 1/2 and 1/1", ia, ea, ib, eb)
	}
	promtest.Expect(t, promtest.Gather(t, l.c), 1, "flowlens_agent_captures_running")
	res, _ := r.stop(t)
	if res.Reason != "canceled" {
		t.Errorf("reason %q, want canceled", res.Reason)
	}
	ia, ea = tcxPrograms(t, l.p.A, "veth-a")
	if ia != 1 || ea != 1 {
		t.Errorf("after the capture: veth-a %d ingress %d egress programs, want the flow programs only (1/1)", ia, ea)
	}
	promtest.Expect(t, promtest.Gather(t, l.c), 0, "flowlens_agent_captures_running")
}

// TestCaptureDetachesClsact: the same with the clsact fallback: a cls_bpf
// filter of its own, after flowlens's, removed at the end.
func TestCaptureDetachesClsact(t *testing.T) {
	l := newLab(t, capture.Config{}, "--tc-attach=clsact")
	besides := func(ns *netlab.Netns, name string) (n, ingress, egress int) {
		err := ns.Do(func() error {
			link, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if n, err = datapath.BesideFilters(link.Attrs().Index); err != nil {
				return err
			}
			ingress, egress, err = datapath.LegacyFilters(link.Attrs().Index)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	r := l.start(t, capture.Filter{}, capture.Limits{}, nil)
	sendSized(t, l, "10.99.0.1:5000", "10.99.0.2:7001", 10, 10)
	for _, c := range []struct {
		ns   *netlab.Netns
		name string
	}{{l.p.A, "veth-a"}, {l.p.B, "veth-b"}} {
		if n, i, e := besides(c.ns, c.name); n != 2 || i != 1 || e != 1 {
			t.Errorf("%s while capturing: %d capture filters, %d/%d flow filters; want 2 and 1/1", c.name, n, i, e)
		}
	}
	res, pkts := r.stop(t)
	// A zero filter copies every packet: the 10 datagrams on both hooks.
	if res.Packets != 20 || len(pkts) != 20 {
		t.Errorf("%d packets (%d emitted), want 20", res.Packets, len(pkts))
	}
	for _, c := range []struct {
		ns   *netlab.Netns
		name string
	}{{l.p.A, "veth-a"}, {l.p.B, "veth-b"}} {
		if n, i, e := besides(c.ns, c.name); n != 0 || i != 1 || e != 1 {
			t.Errorf("%s after the capture: %d capture filters, %d/%d flow filters; want 0 and 1/1", c.name, n, i, e)
		}
	}
	if l.c.Running() != 0 {
		t.Errorf("running %d after the end", l.c.Running())
	}
}

// TestCaptureMaxPackets: MaxPackets 50 ends the capture at exactly 50.
func TestCaptureMaxPackets(t *testing.T) {
	l := newLab(t, capture.Config{})
	r := l.start(t, capture.Filter{DstPorts: []uint16{7001}, Direction: capture.Egress}, capture.Limits{MaxPackets: 50}, nil)
	sendSized(t, l, "10.99.0.1:5000", "10.99.0.2:7001", 200, 10)
	res, pkts := r.wait(t)
	if res.Reason != "max_packets" || res.Packets != 50 || len(pkts) != 50 {
		t.Fatalf("reason %q, %d packets (%d emitted), want max_packets, 50", res.Reason, res.Packets, len(pkts))
	}
	if l.c.Running() != 0 {
		t.Errorf("running %d after the end", l.c.Running())
	}
}

// TestCaptureRingFull: a one-page ring (one for all CPUs), which holds two
// copies of 1400-byte datagrams (snaplen 1500), and a slow consumer behind a
// one-packet queue; a burst loses packets to both, and every matching
// packet is either captured or counted: captured + ring_full + consumer ==
// sent.
func TestCaptureRingFull(t *testing.T) {
	l := newLab(t, capture.Config{RingBytes: 4096, QueueLen: 1, MaxSnaplen: 1500})
	const n = 2000
	var mu sync.Mutex
	emitted := 0
	r := l.start(t, capture.Filter{Interfaces: []string{"veth-a"}, Direction: capture.Egress, DstPorts: []uint16{7001}},
		capture.Limits{Snaplen: 1500}, func(capture.Packet) error {
			time.Sleep(20 * time.Microsecond)
			mu.Lock()
			emitted++
			mu.Unlock()
			return nil
		})
	if err := netlab.UDPSend(l.p.A, "10.99.0.1:5000", "10.99.0.2:7001", make([]byte, 1400), n); err != nil {
		t.Fatal(err)
	}
	res, _ := r.stop(t)
	t.Logf("result %+v", res)
	full, cons := res.NotCaptured[capture.LostRingFull], res.NotCaptured[capture.LostConsumer]
	if res.Packets+full+cons != n || res.Packets != uint64(emitted) {
		t.Errorf("captured %d + ring_full %d + consumer %d = %d, want %d sent (emitted %d)", res.Packets, full, cons,
			res.Packets+full+cons, n, emitted)
	}
	if full == 0 {
		t.Errorf("ring_full 0: the burst of %d fit a one-page ring", n)
	}
	fams := promtest.Gather(t, l.c)
	promtest.Expect(t, fams, float64(full), "flowlens_agent_capture_lost_packets_total", "reason=ring_full")
	promtest.Expect(t, fams, float64(cons), "flowlens_agent_capture_lost_packets_total", "reason=consumer")
}

// TestFlowCountsUnchanged: the flow records count the same packets and
// bytes with a capture running as without, and both are what was sent.
func TestFlowCountsUnchanged(t *testing.T) {
	l := newLab(t, capture.Config{})
	const n, size = 100, 300
	send := func(sport int) {
		sendSizedFixed(t, l, fmt.Sprintf("10.99.0.1:%d", sport), "10.99.0.2:7001", n, size)
	}
	send(5100)
	r := l.start(t, capture.Filter{}, capture.Limits{}, nil)
	send(5200)
	res, _ := r.stop(t)
	if res.Packets != 2*n {
		t.Errorf("captured %d, want %d (both hooks)", res.Packets, 2*n)
	}
	flows := l.h.Stop()
	for _, sport := range []uint16{5100, 5200} {
		pk, by, _ := agenttest.Sum(flows, agenttest.Match{Src: "10.99.0.1", Sport: sport, Dport: 7001, Proto: 17})
		if pk != n || by != n*(14+20+8+size) {
			t.Errorf("source port %d: flows count %d packets %d bytes, want %d and %d", sport, pk, by, n, n*(14+20+8+size))
		}
	}
}

func sendSizedFixed(t *testing.T, l *lab, src, dst string, n, size int) {
	t.Helper()
	c := agenttest.MustListen(t, l.p.B, dst)
	if err := netlab.UDPSend(l.p.A, src, dst, make([]byte, size), n); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	for i := range n {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, _, err := c.ReadFromUDP(buf); err != nil {
			t.Fatalf("read datagram %d of %d: %v", i, n, err)
		}
	}
	c.Close()
}

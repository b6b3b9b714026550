package capture_test

import (
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/capture"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/packet"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// TestCaptureBridged: a path a0 -> pa [bridge br0] pb -> b0 across three
// namespaces; each matching datagram is copied once per hook it crossed
// (a0 egress, pa ingress, pb egress, b0 ingress), none on the bridge
// device, which forwarded traffic does not cross.
func TestCaptureBridged(t *testing.T) {
	netlab.Require(t)
	a, br, b := netlab.NewNetns(t, "cba"), netlab.NewNetns(t, "cbr"), netlab.NewNetns(t, "cbb")
	for _, ns := range []*netlab.Netns{a, br, b} {
		netlab.Quiet(t, ns)
	}
	la, _ := netlab.Veth(t, a, "a0", br, "pa")
	lb, _ := netlab.Veth(t, b, "b0", br, "pb")
	netlab.QuietBridge(t, br, "br0")
	netlab.SetMaster(t, br, "pa", "br0")
	netlab.SetMaster(t, br, "pb", "br0")
	netlab.AddAddr(t, a, "a0", "10.97.0.1/24")
	netlab.AddAddr(t, b, "b0", "10.97.0.2/24")
	netlab.Neigh(t, a, "a0", "10.97.0.2", lb.Attrs().HardwareAddr)
	netlab.Neigh(t, b, "b0", "10.97.0.1", la.Attrs().HardwareAddr)
	h := agenttest.Start(t, 5, agent.Options{}, "--netns="+a.Name+","+br.Name+","+b.Name)
	l := &lab{h: h, c: capture.New(capture.Config{Enabled: true, MaxSnaplen: 128, Datapath: h.A.DP})}

	const n, base = 200, 10
	r := l.start(t, capture.Filter{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.97.0.0/24")}, Ports: []uint16{7001}}, capture.Limits{}, nil)
	sendSizedNs(t, a, b, "10.97.0.1:5000", "10.97.0.2:7001", n, base)
	sendSizedNs(t, a, b, "10.97.0.1:5000", "10.97.0.2:7002", 20, base) // other port
	res, pkts := r.stop(t)
	want := map[hookKey]bool{
		{"a0", a.Name, capture.Egress}: true, {"pa", br.Name, capture.Ingress}: true,
		{"pb", br.Name, capture.Egress}: true, {"b0", b.Name, capture.Ingress}: true,
	}
	seen := map[hookKey]map[uint32]int{}
	for _, p := range pkts {
		k := hookKey{p.Interface, p.Netns, p.Direction}
		if !want[k] {
			t.Fatalf("packet on %+v, want one of %v", k, want)
		}
		if src, dst := udp4(t, p.Data); src.String() != "10.97.0.1:5000" || dst.String() != "10.97.0.2:7001" {
			t.Fatalf("%+v: %v -> %v", k, src, dst)
		}
		if seen[k] == nil {
			seen[k] = map[uint32]int{}
		}
		seen[k][p.WireLen]++
	}
	t.Logf("result %+v", res)
	if res.Packets != 4*n || len(res.NotCaptured) != 0 {
		t.Errorf("%d packets, not captured %v; want %d, none", res.Packets, res.NotCaptured, 4*n)
	}
	for k := range want {
		if len(seen[k]) != n {
			t.Errorf("%+v: %d distinct datagrams, want %d", k, len(seen[k]), n)
		}
		for size, c := range seen[k] {
			if c != 1 {
				t.Errorf("%+v: datagram of wire length %d copied %d times, want once", k, size, c)
			}
		}
	}
}

// TestCaptureIPv6: IPv6 prefixes and ports; an IPv4 prefix that would
// cover the mapped address matches no IPv6 packet.
func TestCaptureIPv6(t *testing.T) {
	netlab.Require(t)
	p := agenttest.PairOf(t, "c6a", "c6b", "fd00:97::1", "fd00:97::2", "/64", netlab.QuietIPv6)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg())
	l := &lab{p: p, h: h, c: capture.New(capture.Config{Enabled: true, MaxSnaplen: 128, Datapath: h.A.DP})}
	const n = 50
	v4 := l.start(t, capture.Filter{CIDRs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}, capture.Limits{}, nil)
	r := l.start(t, capture.Filter{SrcCIDRs: []netip.Prefix{netip.MustParsePrefix("fd00:97::1/128")}, DstPorts: []uint16{7001}, Direction: capture.Ingress}, capture.Limits{}, nil)
	sendSized(t, l, "[fd00:97::1]:5000", "[fd00:97::2]:7001", n, 10)
	sendSized(t, l, "[fd00:97::1]:5000", "[fd00:97::2]:7002", n, 10)
	res, pkts := r.stop(t)
	if res.Packets != n {
		t.Fatalf("%d packets, want %d (veth-b ingress)", res.Packets, n)
	}
	for _, pk := range pkts {
		d := pk.Data
		if pk.Interface != "veth-b" || len(d) < 62 || binary.BigEndian.Uint16(d[12:]) != 0x86dd || d[20] != 17 {
			t.Fatalf("%s %v: not IPv6 UDP at veth-b ingress: % x", pk.Interface, pk.Direction, d)
		}
		src, _ := netip.AddrFromSlice(d[22:38])
		if src.String() != "fd00:97::1" || binary.BigEndian.Uint16(d[56:]) != 7001 {
			t.Fatalf("source %v, destination port %d", src, binary.BigEndian.Uint16(d[56:]))
		}
	}
	if res, _ := v4.stop(t); res.Packets != 0 {
		t.Errorf("IPv4 0.0.0.0/0 captured %d IPv6 packets, want 0", res.Packets)
	}
}

// TestCaptureTCPFlags: a mask matches packets having all its bits: SYN|ACK
// is the handshake's second packet only, on the two hooks it crosses.
func TestCaptureTCPFlags(t *testing.T) {
	l := newLab(t, capture.Config{})
	r := l.start(t, capture.Filter{TCPFlags: []uint16{0x12}}, capture.Limits{}, nil)
	l.p.Transfer(t, 7100, 100_000)
	res, pkts := r.stop(t)
	if res.Packets != 2 {
		t.Fatalf("%d packets, want the SYN-ACK at veth-b egress and veth-a ingress", res.Packets)
	}
	for _, p := range pkts {
		if p.Data[23] != 6 || p.Data[14+20+13] != 0x12 || binary.BigEndian.Uint16(p.Data[34:]) != 7100 {
			t.Errorf("%s %v: not the SYN-ACK from port 7100: % x", p.Interface, p.Direction, p.Data)
		}
	}
}

// TestCaptureRefusedAndClamped: --capture=false refuses with ErrDisabled;
// a snaplen above --capture-max-snaplen gets the maximum, and the result
// says so; a filter naming no watched interface is ErrNoInterface.
func TestCaptureRefusedAndClamped(t *testing.T) {
	l := newLab(t, capture.Config{MaxSnaplen: 100})
	off := capture.New(capture.Config{Enabled: false, MaxSnaplen: 100, Datapath: l.h.A.DP})
	if _, err := off.Run(context.Background(), capture.Filter{}, capture.Limits{}, nil); !errors.Is(err, capture.ErrDisabled) ||
		err.Error() != "packet capture is disabled on this agent (--capture=false)" {
		t.Errorf("disabled: %v", err)
	}
	if _, err := l.c.Run(context.Background(), capture.Filter{Interfaces: []string{"eth9"}}, capture.Limits{}, nil); !errors.Is(err, capture.ErrNoInterface) {
		t.Errorf("no interface: %v", err)
	}
	if _, err := l.c.Run(context.Background(), capture.Filter{Ports: make([]uint16, 17)}, capture.Limits{}, nil); err == nil ||
		err.Error() != "capture filter: at most 16 ports in each of any, source and destination" {
		t.Errorf("17 ports: %v", err)
	}
	r := l.start(t, capture.Filter{DstPorts: []uint16{7001}, Direction: capture.Egress}, capture.Limits{Snaplen: 1500, MaxPackets: 5}, nil)
	sendSized(t, l, "10.99.0.1:5000", "10.99.0.2:7001", 5, 1000)
	res, pkts := r.wait(t)
	if !res.SnaplenClamped || res.Snaplen != 100 || len(pkts) != 5 {
		t.Fatalf("result %+v with %d packets, want snaplen 100 clamped, 5 packets", res, len(pkts))
	}
	for _, p := range pkts {
		if len(p.Data) != 100 || p.WireLen < 1042 {
			t.Errorf("%d bytes of %d copied, want 100", len(p.Data), p.WireLen)
		}
	}
}

// TestCaptureTun: a device without an Ethernet header (tun): the copy
// starts at the IP header and says so (RawIP), both directions.
func TestCaptureTun(t *testing.T) {
	netlab.Require(t)
	ns := netlab.NewNetns(t, "ctun")
	netlab.Quiet(t, ns)
	q, _ := netlab.Tun(t, ns, "tun0")
	netlab.AddAddr(t, ns, "tun0", "10.96.0.1/24")
	go func() { // what the tun transmits, read and dropped
		buf := make([]byte, 65536)
		for {
			if _, err := q.Read(buf); err != nil {
				return
			}
		}
	}()
	h := agenttest.Start(t, 1, agent.Options{}, "--netns="+ns.Name)
	l := &lab{h: h, c: capture.New(capture.Config{Enabled: true, MaxSnaplen: 128, Datapath: h.A.DP})}
	c := agenttest.MustListen(t, ns, "10.96.0.1:9000")
	r := l.start(t, capture.Filter{Ports: []uint16{9000}}, capture.Limits{}, nil)
	const n = 10
	in := packet.Cat(packet.IPv4(packet.ProtoUDP, "10.96.0.2", "10.96.0.1", packet.UDPLen+20, packet.Checksum()), packet.UDP(4000, 9000, 20))
	for range n {
		if _, err := q.Write(in); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 100)
	for i := range n {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, _, err := c.ReadFromUDP(buf); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
	}
	if err := netlab.UDPSend(ns, "10.96.0.1:4001", "10.96.0.2:9000", make([]byte, 30), n); err != nil {
		t.Fatal(err)
	}
	res, pkts := r.stop(t)
	dirs := map[capture.Direction]int{}
	for _, p := range pkts {
		if !p.RawIP || p.Interface != "tun0" || p.Data[0]>>4 != 4 || int(binary.BigEndian.Uint16(p.Data[2:])) != int(p.WireLen) {
			t.Fatalf("%s %v raw %v: want an IPv4 packet from its header, wire length %d: % x", p.Interface, p.Direction, p.RawIP, p.WireLen, p.Data)
		}
		dirs[p.Direction]++
	}
	if res.Packets != 2*n || dirs[capture.Ingress] != n || dirs[capture.Egress] != n {
		t.Errorf("%d packets, by direction %v; want %d each way", res.Packets, dirs, n)
	}
}

// TestCaptureBounds: MaxBytes ends the capture before the packet that
// would pass it; Duration ends it by itself; an emit error ends it and is
// returned, with what was handed over before.
func TestCaptureBounds(t *testing.T) {
	l := newLab(t, capture.Config{})
	f := capture.Filter{DstPorts: []uint16{7001, 7002}, Direction: capture.Egress}
	r := l.start(t, f, capture.Limits{MaxBytes: 1000}, nil)
	sendSized(t, l, "10.99.0.1:5000", "10.99.0.2:7001", 20, 1000) // 128 bytes copied of each
	res, pkts := r.wait(t)
	if res.Reason != "max_bytes" || res.Packets != 7 || res.Bytes != 7*128 || len(pkts) != 7 {
		t.Errorf("max bytes 1000: reason %q, %d packets, %d bytes; want max_bytes, 7, 896", res.Reason, res.Packets, res.Bytes)
	}

	start := time.Now()
	r = l.start(t, f, capture.Limits{Duration: 300 * time.Millisecond}, nil)
	res, _ = r.wait(t)
	if res.Reason != "duration" || time.Since(start) < 300*time.Millisecond {
		t.Errorf("duration: reason %q after %v", res.Reason, time.Since(start))
	}

	broke := errors.New("stream broke")
	n := 0
	r = l.start(t, f, capture.Limits{}, func(capture.Packet) error {
		if n++; n == 3 {
			return broke
		}
		return nil
	})
	sendSized(t, l, "10.99.0.1:5001", "10.99.0.2:7002", 10, 10)
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatal("an emit error did not end the capture")
	}
	if !errors.Is(r.err, broke) || r.res.Packets != 2 || r.res.Reason != "error" {
		t.Errorf("emit error: %v, %d packets, reason %q; want %v, 2, error", r.err, r.res.Packets, r.res.Reason, broke)
	}
	if l.c.Running() != 0 {
		t.Errorf("running %d after the end", l.c.Running())
	}
}

// TestCaptureMemory: the queue between the ring and emit is bounded in
// bytes: with emit blocked and room for 10 packets of 128 copied bytes,
// 10 or 11 of 200 matching datagrams are handed over (one may be in emit
// before the queue fills) and the rest count as "consumer", exactly; the
// ring and scratch values are reported to Config.OnKernelBytes while the
// capture runs, and 0 after.
func TestCaptureMemory(t *testing.T) {
	var mu sync.Mutex
	var charged []int64
	cfg := capture.Config{RingBytes: 100_000, QueueBytes: 10 * capture.QueueCost(128), OnKernelBytes: func(n int64) {
		mu.Lock()
		charged = append(charged, n)
		mu.Unlock()
	}}
	l := newLab(t, cfg)
	ring, scratch, queue := l.c.Memory(128)
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	if ring != 128<<10 || scratch != int64(cpus)*(32+128) || queue != 10*capture.QueueCost(128) {
		t.Fatalf("memory: ring %d scratch %d queue %d; want %d, %d, %d", ring, scratch, queue, 128<<10, cpus*(32+128), 10*capture.QueueCost(128))
	}
	const n = 200
	release := make(chan struct{})
	var emitted atomic.Int64
	r := l.start(t, capture.Filter{DstPorts: []uint16{7001}, Direction: capture.Egress}, capture.Limits{}, func(capture.Packet) error {
		<-release
		emitted.Add(1)
		return nil
	})
	// Registered after start's cleanup, so it runs first: a test that
	// fails while emit blocks still lets the capture end.
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	mu.Lock()
	if len(charged) != 1 || charged[0] != ring+scratch {
		t.Errorf("charged %v while running, want [%d]", charged, ring+scratch)
	}
	mu.Unlock()
	sendSized(t, l, "10.99.0.1:5000", "10.99.0.2:7001", n, 200)
	// At most 11 are accepted while emit blocks: wait for the rest to be
	// counted before releasing it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if v, _ := promtest.Value(promtest.Gather(t, l.c), "flowlens_agent_capture_lost_packets_total", "reason=consumer"); v >= n-11 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue's excess was not counted in 30s")
		}
	}
	unblock()
	res, _ := r.stop(t)
	t.Logf("result %+v", res)
	cons := res.NotCaptured[capture.LostConsumer]
	if res.Packets < 10 || res.Packets > 11 || res.Packets+cons != n || res.NotCaptured[capture.LostRingFull] != 0 ||
		emitted.Load() != int64(res.Packets) {
		t.Errorf("captured %d + consumer %d (ring_full %d), want 10 or 11 + the rest of %d", res.Packets, cons,
			res.NotCaptured[capture.LostRingFull], n)
	}
	mu.Lock()
	if len(charged) != 2 || charged[1] != 0 {
		t.Errorf("charged %v, want [%d 0]", charged, ring+scratch)
	}
	mu.Unlock()
}

// TestCaptureNewInterface: an interface the agent attaches to while a
// capture runs (a pod created during the capture) is hooked too. A second
// veth pair, veth-a2 (10.99.1.1) to veth-b2 (10.99.1.2), appears after the
// capture started: its 30 datagrams are copied once at veth-a2's egress and
// once at veth-b2's ingress, named, as the first pair's 20 are on theirs.
func TestCaptureNewInterface(t *testing.T) {
	l := newLab(t, capture.Config{})
	r := l.start(t, capture.Filter{DstPorts: []uint16{7001}}, capture.Limits{}, nil)
	sendSized(t, l, "10.99.0.1:5000", "10.99.0.2:7001", 20, 10)

	la, lb := netlab.Veth(t, l.p.A, "veth-a2", l.p.B, "veth-b2")
	netlab.AddAddr(t, l.p.A, "veth-a2", "10.99.1.1/24")
	netlab.AddAddr(t, l.p.B, "veth-b2", "10.99.1.2/24")
	netlab.Neigh(t, l.p.A, "veth-a2", "10.99.1.2", lb.Attrs().HardwareAddr)
	netlab.Neigh(t, l.p.B, "veth-b2", "10.99.1.1", la.Attrs().HardwareAddr)
	// Hooked: the flow program and the capture's on each tcx hook of both
	// (the datapath lists an interface as attached before its OnAttach
	// callbacks run, so that listing would not do).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ia, ea := tcxPrograms(t, l.p.A, "veth-a2")
		ib, eb := tcxPrograms(t, l.p.B, "veth-b2")
		if ia == 2 && ea == 2 && ib == 2 && eb == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new pair not hooked within 30 s: veth-a2 %d/%d, veth-b2 %d/%d tcx programs (ingress/egress); want 2/2", ia, ea, ib, eb)
		}
	}
	sendSizedNs(t, l.p.A, l.p.B, "10.99.1.1:5000", "10.99.1.2:7001", 30, 10)

	res, pkts := r.stop(t)
	got := map[hookKey]int{}
	for _, p := range pkts {
		got[hookKey{p.Interface, p.Netns, p.Direction}]++
	}
	want := map[hookKey]int{
		{"veth-a", l.p.A.Name, capture.Egress}: 20, {"veth-b", l.p.B.Name, capture.Ingress}: 20,
		{"veth-a2", l.p.A.Name, capture.Egress}: 30, {"veth-b2", l.p.B.Name, capture.Ingress}: 30,
	}
	if res.Packets != 100 || len(res.NotCaptured) != 0 || !maps.Equal(got, want) {
		t.Errorf("%d packets (not captured %v) by hook %v; want 100 by hook %v", res.Packets, res.NotCaptured, got, want)
	}
}

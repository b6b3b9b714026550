package agent_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	ebpflink "github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// N UDP datagrams from A to B: one flow, exact packets, and bytes equal to
// what the sending veth's own counters report.
func TestUDPExactCounts(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts agent.Options
	}{
		{"tcx", agent.Options{}},
		{"clsact", agent.Options{ForceLegacyTC: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			p := agenttest.NewPair(t)
			agenttest.MustListen(t, p.B, p.IPB+":9000")
			h := agenttest.Start(t, 2, mode.opts, p.NetnsArg(), "--cache-active-timeout=1s")
			before, _ := netlab.ReadLinkStats(p.A, p.IfA)
			const n, size = 50, 100
			if err := netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":9000", make([]byte, size), n); err != nil {
				t.Fatal(err)
			}
			after, _ := netlab.ReadLinkStats(p.A, p.IfA)
			flows := h.Stop()
			for _, x := range []struct {
				ns  *netlab.Netns
				ifn string
			}{{p.A, p.IfA}, {p.B, p.IfB}} {
				if q := qdiscs(t, x.ns, x.ifn); q != "" {
					t.Fatalf("left behind on %s/%s: %s", x.ns, x.ifn, q)
				}
			}

			pk, by, recs := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 4000, Dport: 9000, Proto: 17})
			if pk != n || by != n*(14+20+8+size) {
				t.Fatalf("packets=%d bytes=%d, want %d and %d (records: %+v)", pk, by, n, n*(14+20+8+size), recs)
			}
			if dp, db := after.TxPackets-before.TxPackets, after.TxBytes-before.TxBytes; pk != dp || by != db {
				t.Fatalf("flow says %d packets / %d bytes, %s's counters say %d / %d", pk, by, p.IfA, dp, db)
			}
			if len(recs) != 1 {
				t.Fatalf("%d records, want 1", len(recs))
			}
			f := recs[0]
			want := fmt.Sprintf("%s/%s:egress %s/%s:ingress", p.A.Name, p.IfA, p.B.Name, p.IfB)
			if got := f.Ifaces(); got != want {
				t.Fatalf("interfaces %q, want %q", got, want)
			}
			if f.EthType != 0x0800 || f.Sampling != 1 || *f.Partial || f.SrcMAC == "00:00:00:00:00:00" {
				t.Fatalf("record %+v", f)
			}
			if _, err := time.Parse(time.RFC3339Nano, f.EndTime); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A TCP transfer of known size. veth's counters count socket buffers, and
// a TSO buffer stands for many wire segments, each with its own headers:
// the flow's packets are at least the veth's skbs, and its bytes are the
// veth's bytes plus one header per extra segment (Ethernet, IPv4, and TCP
// with the timestamp option Linux negotiates by default: 14+20+32). The ACK
// direction has no GSO: it equals the receive counters exactly.
// (TestGSOBulkTCP checks packets against the sender's own TcpOutSegs.)
func TestTCPTransfer(t *testing.T) {
	p := agenttest.NewPair(t)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg())
	before, _ := netlab.ReadLinkStats(p.A, p.IfA)
	const size = 4 << 20
	p.Transfer(t, 8080, size)
	time.Sleep(200 * time.Millisecond) // let the final FIN/ACK exchange finish
	after, _ := netlab.ReadLinkStats(p.A, p.IfA)
	flows := h.Stop()

	upP, upB, up := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 8080, Proto: 6})
	downP, downB, _ := agenttest.Sum(flows, agenttest.Match{Src: p.IPB, Dst: p.IPA, Sport: 8080, Proto: 6})
	const hdr = 14 + 20 + 32
	skbs, skbBytes := after.TxPackets-before.TxPackets, after.TxBytes-before.TxBytes
	if upP <= skbs || upB != skbBytes+(upP-skbs)*hdr {
		t.Fatalf("A->B flow %d packets / %d bytes; %s tx counters %d skbs / %d bytes (want more packets, and bytes = %d + extra segments * %d)",
			upP, upB, p.IfA, skbs, skbBytes, skbBytes, hdr)
	}
	if downP != after.RxPackets-before.RxPackets || downB != after.RxBytes-before.RxBytes {
		t.Fatalf("B->A flow %d packets / %d bytes; %s rx counters %d / %d", downP, downB, p.IfA, after.RxPackets-before.RxPackets, after.RxBytes-before.RxBytes)
	}
	if upB < size {
		t.Fatalf("A->B flow carried %d bytes, less than the %d sent", upB, size)
	}
	var flags uint16
	for _, f := range up {
		flags |= f.TCPFlags
	}
	if flags&0x02 == 0 || flags&0x01 == 0 || flags&0x10 == 0 { // SYN, FIN, ACK
		t.Fatalf("A->B tcp_flags %#x lack SYN/FIN/ACK", flags)
	}
}

func icmpEcho(seq uint16) []byte {
	b := []byte{8, 0, 0, 0, 0x12, 0x34, byte(seq >> 8), byte(seq), 'f', 'l', 'o', 'w'}
	var s uint32
	for i := 0; i < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	s = (s >> 16) + (s & 0xffff)
	s += s >> 16
	binary.BigEndian.PutUint16(b[2:], ^uint16(s))
	return b
}

// ICMP echo requests and the kernel's replies: two flows keyed on ICMP type.
func TestICMPEcho(t *testing.T) {
	p := agenttest.NewPair(t)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg())
	const n = 5
	err := p.A.Do(func() error {
		c, err := net.ListenPacket("ip4:icmp", p.IPA)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 1500)
		for i := 0; i < n; i++ {
			if _, err := c.WriteTo(icmpEcho(uint16(i)), &net.IPAddr{IP: net.ParseIP(p.IPB)}); err != nil {
				return err
			}
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, _, err := c.ReadFrom(buf); err != nil {
				return fmt.Errorf("no echo reply: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	flows := h.Stop()
	reqP, reqB, req := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Proto: 1})
	repP, _, rep := agenttest.Sum(flows, agenttest.Match{Src: p.IPB, Dst: p.IPA, Proto: 1})
	if reqP != n || repP != n || reqB != n*(14+20+12) {
		t.Fatalf("echo requests %d (%d bytes), replies %d; want %d each", reqP, reqB, repP, n)
	}
	if req[0].IcmpType != 8 || rep[0].IcmpType != 0 || req[0].IcmpCode != 0 {
		t.Fatalf("icmp types %d/%d", req[0].IcmpType, rep[0].IcmpType)
	}
}

// IPv6 UDP: addresses in text form, eth_type 0x86dd, exact counts.
func TestIPv6UDP(t *testing.T) {
	a, b := netlab.NewNetns(t, "a6"), netlab.NewNetns(t, "b6")
	netlab.QuietIPv6(t, a)
	netlab.QuietIPv6(t, b)
	la, lb := netlab.Veth(t, a, "veth-a", b, "veth-b")
	netlab.AddAddr(t, a, "veth-a", "fd00:99::1/64")
	netlab.AddAddr(t, b, "veth-b", "fd00:99::2/64")
	netlab.Neigh(t, a, "veth-a", "fd00:99::2", lb.Attrs().HardwareAddr)
	netlab.Neigh(t, b, "veth-b", "fd00:99::1", la.Attrs().HardwareAddr)
	agenttest.MustListen(t, b, "[fd00:99::2]:9000")
	h := agenttest.Start(t, 2, agent.Options{}, "--netns="+a.Name+","+b.Name)
	const n, size = 20, 64
	if err := netlab.UDPSend(a, "[fd00:99::1]:4000", "[fd00:99::2]:9000", make([]byte, size), n); err != nil {
		t.Fatal(err)
	}
	flows := h.Stop()
	pk, by, recs := agenttest.Sum(flows, agenttest.Match{Src: "fd00:99::1", Dst: "fd00:99::2", Sport: 4000, Dport: 9000, Proto: 17})
	if pk != n || by != n*(14+40+8+size) {
		t.Fatalf("packets=%d bytes=%d, want %d and %d", pk, by, n, n*(14+40+8+size))
	}
	if recs[0].EthType != 0x86dd {
		t.Fatalf("eth_type %#x", recs[0].EthType)
	}
}

// 802.1Q-tagged frames written raw on the veth (this kernel has no VLAN
// devices): keyed on the inner IP header, counted once, bytes include the tag.
func TestVLANTaggedFrames(t *testing.T) {
	p := agenttest.NewPair(t)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg())
	la, lb := link(t, p.A, p.IfA), link(t, p.B, p.IfB)
	frame := append(append([]byte{}, lb.Attrs().HardwareAddr...), la.Attrs().HardwareAddr...)
	frame = append(frame, 0x81, 0x00, 0x00, 0x64, 0x08, 0x00) // 802.1Q VLAN 100, then IPv4
	ip := []byte{0x45, 0, 0, 20 + 8 + 4, 0, 0, 0, 0, 64, 17, 0, 0, 10, 99, 0, 1, 10, 99, 0, 2}
	frame = append(append(frame, ip...), 0x0f, 0xa0, 0x23, 0x28, 0, 12, 0, 0, 'v', 'l', 'a', 'n') // udp 4000 -> 9000
	const n = 12
	before, _ := netlab.ReadLinkStats(p.A, p.IfA)
	err := p.A.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: la.Attrs().Index, Halen: 6}
		for i := 0; i < n; i++ {
			if err := unix.Sendto(fd, frame, 0, sa); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := netlab.ReadLinkStats(p.A, p.IfA)
	flows := h.Stop()
	pk, by, recs := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 4000, Dport: 9000, Proto: 17})
	if pk != n || by != n*uint64(len(frame)) || len(recs) != 1 {
		t.Fatalf("packets=%d bytes=%d records=%d, want %d, %d, 1", pk, by, len(recs), n, n*len(frame))
	}
	if by != after.TxBytes-before.TxBytes {
		t.Fatalf("flow bytes %d, %s counters %d", by, p.IfA, after.TxBytes-before.TxBytes)
	}
	want := fmt.Sprintf("%s/%s:egress %s/%s:ingress", p.A.Name, p.IfA, p.B.Name, p.IfB)
	if got := recs[0].Ifaces(); got != want || recs[0].EthType != 0x0800 {
		t.Fatalf("interfaces %q eth_type %#x, want %q 0x800", got, recs[0].EthType, want)
	}
}

func link(t *testing.T, ns *netlab.Netns, name string) netlink.Link {
	t.Helper()
	hd, err := netlab.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Close()
	l, err := hd.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A path across several interfaces: A -> veth -> bridge (in a router
// namespace) -> veth -> B. One flow, counted once, every interface listed in
// order of first sight.
func TestBridgePathCountedOnce(t *testing.T) {
	a, r, b := netlab.NewNetns(t, "a"), netlab.NewNetns(t, "r"), netlab.NewNetns(t, "b")
	for _, ns := range []*netlab.Netns{a, r, b} {
		netlab.Quiet(t, ns)
	}
	la, _ := netlab.Veth(t, a, "eth0", r, "port-a")
	lb, _ := netlab.Veth(t, b, "eth0", r, "port-b")
	netlab.Bridge(t, r, "br0")
	netlab.SetMaster(t, r, "port-a", "br0")
	netlab.SetMaster(t, r, "port-b", "br0")
	netlab.AddAddr(t, a, "eth0", "10.97.0.1/24")
	netlab.AddAddr(t, b, "eth0", "10.97.0.2/24")
	netlab.Neigh(t, a, "eth0", "10.97.0.2", lb.Attrs().HardwareAddr)
	netlab.Neigh(t, b, "eth0", "10.97.0.1", la.Attrs().HardwareAddr)
	agenttest.MustListen(t, b, "10.97.0.2:9000")
	h := agenttest.Start(t, 1+3+1, agent.Options{}, "--netns="+a.Name+","+r.Name+","+b.Name)
	const n, size = 30, 200
	if err := netlab.UDPSend(a, "10.97.0.1:4000", "10.97.0.2:9000", make([]byte, size), n); err != nil {
		t.Fatal(err)
	}
	flows := h.Stop()
	pk, by, recs := agenttest.Sum(flows, agenttest.Match{Src: "10.97.0.1", Dst: "10.97.0.2", Proto: 17})
	if pk != n || by != n*(14+20+8+size) || len(recs) != 1 {
		t.Fatalf("packets=%d bytes=%d records=%d, want %d, %d, 1", pk, by, len(recs), n, n*(14+20+8+size))
	}
	want := fmt.Sprintf("%s/eth0:egress %s/port-a:ingress %s/port-b:egress %s/eth0:ingress", a.Name, r.Name, r.Name, b.Name)
	if got := recs[0].Ifaces(); got != want {
		t.Fatalf("interfaces %q\nwant %q", got, want)
	}
}

// Two namespaces whose interfaces have the same ifindex are two interfaces,
// with the TC programs shared by every namespace (reading the device's) and
// with the fallback, one set per namespace: a flow each way, each counted
// exactly, on the right interface in the right namespace.
func TestSameIfindexDifferentNetns(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts agent.Options
	}{
		{"shared", agent.Options{}},
		{"per-namespace", agent.Options{ForcePerNamespacePrograms: true}},
	} {
		t.Run(mode.name, func(t *testing.T) { sameIfindex(t, mode.opts) })
	}
}

func sameIfindex(t *testing.T, opts agent.Options) {
	a, b := netlab.NewNetns(t, "ia"), netlab.NewNetns(t, "ib")
	netlab.Quiet(t, a)
	netlab.Quiet(t, b)
	out, err := netlab.RunIn(a, "ip", "link", "add", "veth-a", "index", "77", "type", "veth", "peer", "name", "veth-b", "index", "77", "netns", b.Path)
	if err != nil {
		t.Fatalf("create veth with equal ifindexes: %v: %s", err, out)
	}
	for _, x := range []struct {
		ns        *netlab.Netns
		ifn, cidr string
	}{{a, "veth-a", "10.96.0.1/24"}, {b, "veth-b", "10.96.0.2/24"}} {
		if out, err := netlab.RunIn(x.ns, "ip", "link", "set", x.ifn, "up"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		netlab.AddAddr(t, x.ns, x.ifn, x.cidr)
	}
	agenttest.MustListen(t, b, "10.96.0.2:9000")
	agenttest.MustListen(t, a, "10.96.0.1:9000")
	h := agenttest.Start(t, 2, opts, "--netns="+a.Name+","+b.Name)
	switch shared := h.A.DP.SharedPrograms(); {
	case shared && opts.ForcePerNamespacePrograms:
		t.Fatal("ForcePerNamespacePrograms, yet one shared TC set")
	case !shared && !opts.ForcePerNamespacePrograms:
		t.Log("this kernel refused the shared TC programs: the fallback runs")
	}
	const ab, ba = 25, 9
	if err := netlab.UDPSend(a, "10.96.0.1:4000", "10.96.0.2:9000", []byte("x"), ab); err != nil {
		t.Fatal(err)
	}
	if err := netlab.UDPSend(b, "10.96.0.2:4001", "10.96.0.1:9000", []byte("x"), ba); err != nil {
		t.Fatal(err)
	}
	flows := h.Stop()
	for _, f := range []struct {
		src, dst string
		n        uint64
		want     string
	}{
		{"10.96.0.1", "10.96.0.2", ab, fmt.Sprintf("%s/veth-a:egress %s/veth-b:ingress", a.Name, b.Name)},
		{"10.96.0.2", "10.96.0.1", ba, fmt.Sprintf("%s/veth-b:egress %s/veth-a:ingress", b.Name, a.Name)},
	} {
		pk, _, recs := agenttest.Sum(flows, agenttest.Match{Src: f.src, Dst: f.dst, Proto: 17})
		if pk != f.n || len(recs) != 1 {
			t.Fatalf("%s -> %s: packets=%d records=%d, want %d and 1", f.src, f.dst, pk, len(recs), f.n)
		}
		r := recs[0]
		if got := r.Ifaces(); got != f.want || r.Interfaces[0].Ifindex != 77 || r.Interfaces[1].Ifindex != 77 {
			t.Fatalf("%s -> %s: interfaces %+v, want %s, both ifindex 77", f.src, f.dst, r.Interfaces, f.want)
		}
	}
}

// Continuous traffic across many evictions, the agent on both ends of the
// veth: the sum over every exported record equals what was sent, so no
// packet racing with a flip is lost or counted twice.
func TestContinuousTrafficAcrossEvictions(t *testing.T) {
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--cache-active-timeout=100ms")
	before, _ := netlab.ReadLinkStats(p.A, p.IfA)
	var sent atomic.Int64
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":9000", make([]byte, 60), 50); err != nil {
			t.Fatal(err)
		}
		sent.Add(50)
	}
	after, _ := netlab.ReadLinkStats(p.A, p.IfA)
	flows := h.Stop()
	evictions := h.A.Evictor.Stats.Evictions[0].Load()
	if evictions < 5 {
		t.Fatalf("only %d timer evictions", evictions)
	}
	pk, by, recs := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Proto: 17})
	if pk != uint64(sent.Load()) || by != after.TxBytes-before.TxBytes {
		t.Fatalf("exported %d packets / %d bytes in %d records; sent %d packets, %s counted %d bytes",
			pk, by, len(recs), sent.Load(), p.IfA, after.TxBytes-before.TxBytes)
	}
	t.Logf("%d packets in %d records over %d evictions", pk, len(recs), evictions)
}

// A flow map far smaller than the number of flows: every packet is still
// accounted for (map + overflow ring buffer), and the overflow is counted.
func TestMapFullOverflow(t *testing.T) {
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--cache-max-flows=8", "--cache-active-timeout=1h")
	const flowsN, per = 100, 3
	for i := 0; i < flowsN; i++ {
		if err := netlab.UDPSend(p.A, fmt.Sprintf("%s:%d", p.IPA, 20000+i), p.IPB+":9000", []byte("abc"), per); err != nil {
			t.Fatal(err)
		}
	}
	counters, err := h.A.DP.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	flows := h.Stop()
	pk, by, recs := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Dport: 9000, Proto: 17})
	if pk != flowsN*per || by != flowsN*per*(14+20+8+3) {
		t.Fatalf("packets=%d bytes=%d in %d records; want %d and %d", pk, by, len(recs), flowsN*per, flowsN*per*(14+20+8+3))
	}
	ports := map[uint16]uint64{}
	for _, f := range recs {
		ports[f.SrcPort] += f.Packets
		// A partial record carries drops (here: the listener's full receive
		// buffer) whose flow was counted in another eviction period.
		if len(f.Interfaces) != 2 && !*f.Partial {
			t.Fatalf("record without both interfaces: %+v", f)
		}
	}
	for i := 0; i < flowsN; i++ {
		if ports[uint16(20000+i)] != per {
			t.Fatalf("flow from port %d: %d packets, want %d", 20000+i, ports[uint16(20000+i)], per)
		}
	}
	if counters[3] == 0 { // CNT_OVERFLOW_RECORDS
		t.Fatalf("overflow not counted: %v", counters)
	}
	if counters[4] != 0 {
		t.Fatalf("overflow records lost: %v", counters)
	}
}

// qdiscs lists the clsact qdiscs and tcx programs on an interface ("" if none).
func qdiscs(t *testing.T, ns *netlab.Netns, name string) string {
	t.Helper()
	l := link(t, ns, name)
	hd, err := netlab.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Close()
	qs, err := hd.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, q := range qs {
		if q.Type() == "clsact" {
			out = append(out, "clsact qdisc")
		}
	}
	err = ns.Do(func() error {
		for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			res, err := ebpflink.QueryPrograms(ebpflink.QueryOptions{Target: l.Attrs().Index, Attach: at})
			if err != nil {
				return err
			}
			for range res.Programs {
				out = append(out, "tcx program "+at.String())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, ", ")
}

// Interfaces that appear after start are attached and observed; those that
// go away are detached.
func TestInterfacesComeAndGo(t *testing.T) {
	p := agenttest.NewPair(t)
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg())
	la, lb := netlab.Veth(t, p.A, "late-a", p.B, "late-b")
	netlab.AddAddr(t, p.A, "late-a", "10.94.0.1/24")
	netlab.AddAddr(t, p.B, "late-b", "10.94.0.2/24")
	netlab.Neigh(t, p.A, "late-a", "10.94.0.2", lb.Attrs().HardwareAddr)
	netlab.Neigh(t, p.B, "late-b", "10.94.0.1", la.Attrs().HardwareAddr)
	waitAttached(t, h, 4)
	agenttest.MustListen(t, p.B, "10.94.0.2:9000")
	if err := netlab.UDPSend(p.A, "10.94.0.1:4000", "10.94.0.2:9000", []byte("late"), 7); err != nil {
		t.Fatal(err)
	}
	hd, err := netlab.Handle(p.A)
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Close()
	if err := hd.LinkDel(la); err != nil { // deletes both ends
		t.Fatal(err)
	}
	waitAttached(t, h, 2)
	flows := h.Stop()
	pk, _, recs := agenttest.Sum(flows, agenttest.Match{Src: "10.94.0.1", Dst: "10.94.0.2", Proto: 17})
	if pk != 7 || len(recs) != 1 || recs[0].Interfaces[0].Name != "late-a" || recs[0].Interfaces[1].Name != "late-b" {
		t.Fatalf("late interfaces: %d packets in %+v", pk, recs)
	}
}

func waitAttached(t *testing.T, h *agenttest.Harness, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.A.DP.Attached() != want {
		if time.Now().After(deadline) {
			t.Fatalf("attached to %d interfaces, want %d", h.A.DP.Attached(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// --sampling=4 looks at one packet in four (chosen at random per packet):
// the count is binomial, the record says its sampling rate.
func TestSampling(t *testing.T) {
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--sampling=4")
	const n = 4000
	if err := netlab.UDPSend(p.A, p.IPA+":4000", p.IPB+":9000", []byte("s"), n); err != nil {
		t.Fatal(err)
	}
	flows := h.Stop()
	pk, _, recs := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Proto: 17})
	// mean 1000, standard deviation ~27: ±250 is more than 9 sigma.
	if pk < 750 || pk > 1250 || recs[0].Sampling != 4 {
		t.Fatalf("sampled %d of %d packets (sampling=%d), want about 1000", pk, n, recs[0].Sampling)
	}
}

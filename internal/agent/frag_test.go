package agent_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// IP fragments in their flow (issue 12): every fragment of a datagram
// counts in the datagram's flow (the ports of its first fragment); a later
// fragment whose first was never seen counts under port 0, flagged.

// fragMetric reads one unlabelled series from the agent's /metrics.
func fragMetric(t *testing.T, h *agenttest.Harness, name string) uint64 {
	t.Helper()
	resp, err := http.Get("http://" + h.A.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no series %s in /metrics", name)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(v)
}

const fragUnmatchedMetric = "flowlens_agent_frag_unmatched_packets_total"

// fragWire is what a datagram with ipPayload bytes after the fixed IP header
// (UDP header and data) occupies on an Ethernet link of the given MTU,
// fragmented as the kernel does: every fragment but the last carries the
// largest multiple of 8 bytes that fits after the IP header (and, IPv6, the
// 8-byte fragment header); each is its own frame with its own headers.
func fragWire(ipPayload, mtu, ipHdr, fragHdr int) (frags, bytes int) {
	per := (mtu - ipHdr - fragHdr) &^ 7
	frags = (ipPayload + per - 1) / per
	return frags, ipPayload + frags*(packet.EthLen+ipHdr+fragHdr)
}

// fragSend sends n datagrams of size bytes from src to dst out of a UDP
// socket in ns. IPv4: IP_PMTUDISC_DONT, so the kernel fragments (no DF,
// no EMSGSIZE); IPv6 fragments at the source by default.
func fragSend(t *testing.T, ns *netlab.Netns, src, dst string, size, n int) {
	t.Helper()
	la, err := net.ResolveUDPAddr("udp", src)
	if err != nil {
		t.Fatal(err)
	}
	ra, err := net.ResolveUDPAddr("udp", dst)
	if err != nil {
		t.Fatal(err)
	}
	err = ns.Do(func() error {
		c, err := net.ListenUDP("udp", la)
		if err != nil {
			return err
		}
		defer c.Close()
		if la.IP.To4() != nil {
			rc, err := c.SyscallConn()
			if err != nil {
				return err
			}
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DONT)
			}); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("IP_MTU_DISCOVER: %w", serr)
			}
		}
		for i := 0; i < n; i++ {
			if _, err := c.WriteToUDP(make([]byte, size), ra); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fragReceive reads n datagrams of size bytes from c: the fragments made
// whole datagrams again.
func fragReceive(t *testing.T, c *net.UDPConn, size, n int) {
	t.Helper()
	buf := make([]byte, 65536)
	for i := 0; i < n; i++ {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, _, err := c.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i+1, n, err)
		}
		if m != size {
			t.Fatalf("datagram %d: %d bytes, want %d", i+1, m, size)
		}
	}
}

// fragPair is a veth pair between two namespaces, IPv4 (agenttest.NewPair) or IPv6.
func fragPair(t *testing.T, v6 bool) *agenttest.Pair {
	t.Helper()
	if !v6 {
		return agenttest.NewPair(t)
	}
	return agenttest.PairOf(t, "fa6", "fb6", "fd00:98::1", "fd00:98::2", "/64", netlab.QuietIPv6)
}

// UDP datagrams of 3000 bytes over a 1500-byte MTU, IPv4 and IPv6: every
// fragment counted (the sender's veth counters, and the fragment arithmetic
// independently), all in the datagram's flow, none under port 0, none
// unmatched. Then fragments without their first fragment, written raw on
// the veth: counted under port 0, flagged, and counted by the metric at
// each hook that saw them.
func TestFragments(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name, ipHdr, fragHdr, ethType := "ipv4", packet.IPv4Len, 0, uint16(0x0800)
		if v6 {
			name, ipHdr, fragHdr, ethType = "ipv6", packet.IPv6Len, 8, 0x86dd
		}
		t.Run(name, func(t *testing.T) {
			p := fragPair(t, v6)
			ln := agenttest.MustListen(t, p.B, net.JoinHostPort(p.IPB, "9000"))
			h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--metrics-address=127.0.0.1:0")
			const n, size, mtu = 20, 3000, 1500
			if l := link(t, p.A, p.IfA); l.Attrs().MTU != mtu {
				t.Fatalf("%s MTU %d, want %d", p.IfA, l.Attrs().MTU, mtu)
			}
			before, _ := netlab.ReadLinkStats(p.A, p.IfA)
			fragSend(t, p.A, net.JoinHostPort(p.IPA, "4000"), net.JoinHostPort(p.IPB, "9000"), size, n)
			fragReceive(t, ln, size, n)
			after, _ := netlab.ReadLinkStats(p.A, p.IfA)
			unmatched := fragMetric(t, h, fragUnmatchedMetric)
			h.Stop()
			flows := wireCounted(agenttest.ParseFlows(t, h.Output()))

			per, perBytes := fragWire(packet.UDPLen+size, mtu, ipHdr, fragHdr)
			wantP, wantB := uint64(n*per), uint64(n*perBytes)
			if dp, db := after.TxPackets-before.TxPackets, after.TxBytes-before.TxBytes; dp != wantP || db != wantB {
				t.Fatalf("%s sent %d packets / %d bytes, want %d fragments / %d bytes (%d per datagram)", p.IfA, dp, db, wantP, wantB, per)
			}
			var all, inFlow []agenttest.JSONFlow
			for _, f := range flows {
				if f.SrcAddr == p.IPA && f.DstAddr == p.IPB && f.Proto == 17 {
					all = append(all, f)
					if f.SrcPort == 4000 && f.DstPort == 9000 {
						inFlow = append(inFlow, f)
					}
				}
			}
			var pk, by uint64
			for _, f := range inFlow {
				pk += f.Packets
				by += f.Bytes
			}
			t.Logf("%d datagrams: %d fragments each; flow %d packets / %d bytes in %d records; %s tx %d / %d",
				n, per, pk, by, len(inFlow), p.IfA, after.TxPackets-before.TxPackets, after.TxBytes-before.TxBytes)
			if pk != wantP || by != wantB {
				t.Fatalf("flow 4000→9000: %d packets / %d bytes, want %d / %d (every fragment)", pk, by, wantP, wantB)
			}
			for _, f := range all {
				if f.SrcPort != 4000 || f.DstPort != 9000 || f.FragUnmatched != nil {
					t.Fatalf("a record outside the datagram's flow: ports %d→%d, %d packets, frag_unmatched %v", f.SrcPort, f.DstPort, f.Packets, f.FragUnmatched)
				}
			}
			want := fmt.Sprintf("%s/%s:egress %s/%s:ingress", p.A.Name, p.IfA, p.B.Name, p.IfB)
			if len(inFlow) != 1 {
				t.Fatalf("%d records of the flow, want 1", len(inFlow))
			}
			if got := inFlow[0].Ifaces(); got != want || inFlow[0].EthType != ethType {
				t.Fatalf("interfaces %q eth_type %#x; want %q, %#x", got, inFlow[0].EthType, want, ethType)
			}
			if unmatched != 0 {
				t.Fatalf("%s = %d, want 0", fragUnmatchedMetric, unmatched)
			}
		})
	}

	// Orphans: later fragments (offset > 0, no first fragment ever sent) of
	// distinct datagrams, written raw on A's veth. Each is counted once, in
	// a port-0 flow flagged frag_unmatched. The datapath counts
	// CNT_FRAG_UNMATCHED in handle(), before the dedup, so each hook that
	// sees a fragment counts it: A's egress and B's ingress, 2 per fragment.
	for _, v6 := range []bool{false, true} {
		name := "orphan-ipv4"
		if v6 {
			name = "orphan-ipv6"
		}
		t.Run(name, func(t *testing.T) {
			p := fragPair(t, v6)
			h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--metrics-address=127.0.0.1:0")
			la, lb := link(t, p.A, p.IfA), link(t, p.B, p.IfB)
			var dst, src packet.MAC
			copy(dst[:], lb.Attrs().HardwareAddr)
			copy(src[:], la.Attrs().HardwareAddr)
			const n, data = 7, 48
			var frames [][]byte
			for i := 0; i < n; i++ {
				if v6 {
					frames = append(frames, packet.Cat(
						packet.Eth(packet.EtherTypeIPv6, packet.MACs(dst, src)),
						packet.IPv6(packet.ProtoFragment, p.IPA, p.IPB, 8+data),
						packet.Fragment6(packet.ProtoUDP, 1448/8, false, uint32(0x5100+i)),
						packet.Payload(data)))
				} else {
					frames = append(frames, packet.Cat(
						packet.Eth(packet.EtherTypeIPv4, packet.MACs(dst, src)),
						packet.IPv4(packet.ProtoUDP, p.IPA, p.IPB, data, packet.ID(uint16(0x5100+i)), packet.Frag(0, 1480/8), packet.Checksum()),
						packet.Payload(data)))
				}
			}
			before, _ := netlab.ReadLinkStats(p.A, p.IfA)
			wireSendFrames(t, p.A, la.Attrs().Index, frames)
			after, _ := netlab.ReadLinkStats(p.A, p.IfA)
			unmatched := fragMetric(t, h, fragUnmatchedMetric)
			h.Stop()
			flows := wireCounted(agenttest.ParseFlows(t, h.Output()))

			wantB := uint64(n * len(frames[0]))
			if dp, db := after.TxPackets-before.TxPackets, after.TxBytes-before.TxBytes; dp != n || db != wantB {
				t.Fatalf("%s sent %d packets / %d bytes, want %d / %d", p.IfA, dp, db, n, wantB)
			}
			var recs []agenttest.JSONFlow
			var pk, by uint64
			for _, f := range flows {
				if f.SrcAddr == p.IPA && f.DstAddr == p.IPB {
					recs = append(recs, f)
					pk += f.Packets
					by += f.Bytes
				}
			}
			t.Logf("%d orphan fragments of %d bytes: %d records, %d packets / %d bytes; %s = %d", n, len(frames[0]), len(recs), pk, by, fragUnmatchedMetric, unmatched)
			if len(recs) != 1 || pk != n || by != wantB {
				t.Fatalf("%d records with %d packets / %d bytes, want 1 with %d / %d", len(recs), pk, by, n, wantB)
			}
			f := recs[0]
			want := fmt.Sprintf("%s/%s:egress %s/%s:ingress", p.A.Name, p.IfA, p.B.Name, p.IfB)
			if f.SrcPort != 0 || f.DstPort != 0 || f.Proto != 17 || f.FragUnmatched == nil || !*f.FragUnmatched || f.Ifaces() != want {
				t.Fatalf("record ports %d→%d proto %d frag_unmatched %v interfaces %q; want 0→0, 17, true, %q",
					f.SrcPort, f.DstPort, f.Proto, f.FragUnmatched, f.Ifaces(), want)
			}
			if unmatched != 2*n {
				t.Fatalf("%s = %d, want %d (%d fragments, each seen at 2 hooks)", fragUnmatchedMetric, unmatched, 2*n, n)
			}
		})
	}
}

// Drops of fragments follow the same rule (bpf/drops.h): later fragments
// dropped at B's netdev ingress (nftables, after the TC hook: before the
// kernel reassembles them) are counted as drops of the datagram's flow, with
// the first fragment's ports, as the wire bytes they had, not under port 0.
func TestFragmentDrops(t *testing.T) {
	p := agenttest.NewPair(t)
	netlab.Run(t, p.B, "nft", "add", "table", "netdev", "fltest")
	netlab.Run(t, p.B, "nft", "add chain netdev fltest in { type filter hook ingress device "+p.IfB+" priority 0; }")
	netlab.Run(t, p.B, "nft", "add rule netdev fltest in ip frag-off & 0x1fff != 0 drop")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=drops")
	const n, size, mtu = 10, 3000, 1500
	fragSend(t, p.A, net.JoinHostPort(p.IPA, "4711"), net.JoinHostPort(p.IPB, "9711"), size, n)
	time.Sleep(100 * time.Millisecond) // the last fragments reach B's ingress
	flows := h.Stop()

	// Per datagram: fragments of 1480, 1480 and 48 bytes of IP payload; the
	// two later ones (1500 and 68 bytes of IP) are dropped.
	per, perBytes := fragWire(packet.UDPLen+size, mtu, packet.IPv4Len, 0)
	firstBytes := packet.EthLen + mtu
	dropped, droppedBytes := uint64(n*(per-1)), uint64(n*(perBytes-firstBytes))
	pk, by, recs := agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 4711, Dport: 9711, Proto: 17})
	drops, dropBytes, _, _, causes, _ := agenttest.EnrichSum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 4711, Dport: 9711, Proto: 17})
	if pk != uint64(n*per) || by != uint64(n*perBytes) {
		t.Fatalf("flow %d packets / %d bytes, want %d / %d (every fragment, counted at A's egress)", pk, by, n*per, n*perBytes)
	}
	if drops != dropped || dropBytes != droppedBytes || !causes["NETFILTER_DROP"] || len(causes) != 1 {
		t.Fatalf("flow drops %d packets / %d bytes, causes %v; want %d / %d, NETFILTER_DROP (records %+v)", drops, dropBytes, causes, dropped, droppedBytes, recs)
	}
	for _, f := range flows {
		if f.SrcAddr == p.IPA && f.DstAddr == p.IPB && f.Proto == 17 && f.SrcPort == 0 && f.DstPort == 0 && f.DropPackets != 0 {
			t.Fatalf("%d fragment drops under port 0: %+v", f.DropPackets, f)
		}
	}
}

package agent_test

import (
	"encoding/binary"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// Live: frames whose IP header is not in the skb's linear area (an
// AF_PACKET socket with a virtio-net header of hdr_len 14 puts only the
// Ethernet header there when the frame is a page or more), so the TC
// programs parse them again after bpf_skb_pull_data (bpf/flows.h handle,
// bpf/parse.h flowlens_reparse): each kind (TCP, UDP behind an 802.1Q tag,
// IPv6 UDP) ends in its flow with its ports, counted once across veth-a's
// egress and veth-b's ingress, every frame and byte, and no packet in the
// truncated counter.
func TestHeadersBeyondLinearAreaLive(t *testing.T) {
	p := agenttest.NewPair(t)
	la, lb := link(t, p.A, p.IfA), link(t, p.B, p.IfB)
	const mtu, size = 9000, 6000 // frames past a page: not linear
	for _, l := range []struct {
		ns *netlab.Netns
		l  netlink.Link
	}{{p.A, la}, {p.B, lb}} {
		hd, err := netlab.Handle(l.ns)
		if err != nil {
			t.Fatal(err)
		}
		err = hd.LinkSetMTU(l.l, mtu)
		hd.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=none", "--cache-active-timeout=1h")
	var dst, src packet.MAC
	copy(dst[:], lb.Attrs().HardwareAddr)
	copy(src[:], la.Attrs().HardwareAddr)
	macs := packet.MACs(dst, src)
	pad := func(hdrs int) int { return size - hdrs }
	type kind struct {
		name  string
		frame []byte
		m     agenttest.Match
		n     int
	}
	tcp := packet.Cat(packet.Eth(packet.EtherTypeIPv4, macs),
		packet.IPv4(packet.ProtoTCP, "10.77.2.1", "10.77.2.2", 20+pad(14+20+20)), packet.TCP(4001, 80, packet.ACK),
		make([]byte, pad(14+20+20)))
	udp := packet.Cat(packet.Eth(packet.EtherTypeIPv4, macs, packet.Dot1Q(7)),
		packet.IPv4(packet.ProtoUDP, "10.77.2.3", "10.77.2.2", packet.UDPLen+pad(18+20+8)), packet.UDP(4002, 53, pad(18+20+8)))
	udp6 := packet.Cat(packet.Eth(packet.EtherTypeIPv6, macs),
		packet.IPv6(packet.ProtoUDP, "fd77::2:1", "fd77::2:2", packet.UDPLen+pad(14+40+8)), packet.UDP(4003, 443, pad(14+40+8)))
	kinds := []kind{
		{"tcp", tcp, agenttest.Match{Src: "10.77.2.1", Dst: "10.77.2.2", Sport: 4001, Dport: 80, Proto: 6}, 3},
		{"udp behind an 802.1Q tag", udp, agenttest.Match{Src: "10.77.2.3", Dst: "10.77.2.2", Sport: 4002, Dport: 53, Proto: 17}, 4},
		{"ipv6 udp", udp6, agenttest.Match{Src: "fd77::2:1", Dst: "fd77::2:2", Sport: 4003, Dport: 443, Proto: 17}, 5},
	}
	before, err := h.A.DP.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		if len(k.frame) != size {
			t.Fatalf("%s: a %d-byte frame, want %d", k.name, len(k.frame), size)
		}
		for range k.n {
			pullSendNonLinear(t, p.A, la.Attrs().Index, k.frame)
		}
	}
	after, err := h.A.DP.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	flows := h.Stop()
	if d := after[datapath.CounterTruncated] - before[datapath.CounterTruncated]; d != 0 {
		t.Errorf("truncated_packets moved by %d: a frame was not parsed again after the pull", d)
	}
	for _, k := range kinds {
		pk, by, recs := agenttest.Sum(flows, k.m)
		recs = wireCounted(recs)
		if pk != uint64(k.n) || by != uint64(k.n*size) || len(recs) != 1 || len(recs[0].Interfaces) != 2 {
			t.Errorf("%s: %d packets, %d bytes in %d records; want %d, %d in 1 listing 2 interfaces (%+v)",
				k.name, pk, by, len(recs), k.n, k.n*size, recs)
		} else if recs[0].L4Unread || recs[0].ExtUnread {
			t.Errorf("%s: flagged unread: %+v", k.name, recs[0])
		}
	}
}

// pullSendNonLinear writes frame on the interface ifindex of ns through an
// AF_PACKET socket with a virtio-net header (PACKET_VNET_HDR) whose hdr_len
// is the Ethernet header's: the kernel copies only those 14 bytes into the
// skb's linear area and the rest into pages (packet_alloc_skb, for a frame
// of a page or more).
func pullSendNonLinear(t *testing.T, ns *netlab.Netns, ifindex int, frame []byte) {
	t.Helper()
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			return err
		}
		// struct virtio_net_hdr: flags, gso_type (u8: 0, none), hdr_len,
		// gso_size, csum_start, csum_offset (u16, little endian).
		vh := make([]byte, 10)
		binary.LittleEndian.PutUint16(vh[2:], 14)
		return unix.Sendto(fd, append(vh, frame...), 0, &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6})
	})
	if err != nil {
		t.Fatal(err)
	}
}

package datapath_test

import (
	"encoding/binary"

	"github.com/cilium/ebpf"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// Encapsulated frames, hand-built, through BPF_PROG_TEST_RUN: a VXLAN,
// Geneve or IP-in-IP packet is keyed on its inner 7-tuple (bpf/tunnel.h),
// counted there exactly (repeat packets, the frame's bytes), and with
// overlay_on the inner flow's enrichment entry holds the outer endpoints,
// the tunnel type and the VNI. What cannot be read through keeps its
// outer key and no tunnel.
func TestTunnelInnerKey(t *testing.T) {
	needBPF(t)
	const (
		podA, podB   = "10.244.1.2", "10.244.2.3"
		nodeA, nodeB = "192.168.50.1", "192.168.50.2"
		pod6A, pod6B = "fd44::1:2", "fd44::2:3"
		node6A       = "fd50::1"
		node6B       = "fd50::2"
		repeat       = 7
	)
	eth4, eth6 := packet.Eth(packet.EtherTypeIPv4), packet.Eth(packet.EtherTypeIPv6)
	inner4 := packet.Cat(packet.IPv4(packet.ProtoUDP, podA, podB, 8+32), packet.UDP(40000, 5000, 32))
	inner6 := packet.Cat(packet.IPv6(packet.ProtoTCP, pod6A, pod6B, 20), packet.TCP(40001, 443, packet.ACK))
	udp4 := func(dport uint16, body []byte) []byte {
		return packet.Cat(eth4, packet.IPv4(packet.ProtoUDP, nodeA, nodeB, 8+len(body)), packet.UDP(51000, dport, len(body))[:packet.UDPLen], body)
	}
	vxlan := func(vni uint32) []byte {
		h := []byte{0x08, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(h[4:], vni<<8)
		return h
	}
	geneve := func(vni uint32, proto uint16, optWords uint8) []byte {
		h := []byte{optWords, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint16(h[2:], proto)
		binary.BigEndian.PutUint32(h[4:], vni<<8)
		return packet.Cat(h, make([]byte, 4*int(optWords)))
	}
	key4 := datapath.FlowKey{SrcIp: v4mapped(podA), DstIp: v4mapped(podB), SrcPort: 40000, DstPort: 5000, Proto: 17}
	key6 := datapath.FlowKey{SrcIp: mapped(pod6A), DstIp: mapped(pod6B), SrcPort: 40001, DstPort: 443, Proto: 6}
	outer := func(dport uint16) datapath.FlowKey {
		return datapath.FlowKey{SrcIp: v4mapped(nodeA), DstIp: v4mapped(nodeB), SrcPort: 51000, DstPort: dport, Proto: 17}
	}
	arp := packet.Cat(packet.Eth(packet.EtherTypeARP), make([]byte, 28))
	for _, tc := range []struct {
		name     string
		pkt      []byte
		key      datapath.FlowKey
		ethType  uint16
		tunType  uint8 // 0: no tunnel recorded
		src, dst [16]byte
		vni      uint32
	}{
		{"vxlan 4789 ipv4 inside", udp4(4789, packet.Cat(vxlan(42), eth4, inner4)), key4, 0x0800, datapath.TunnelVXLAN, v4mapped(nodeA), v4mapped(nodeB), 42},
		{"vxlan 8472 ipv6 inside", udp4(8472, packet.Cat(vxlan(1), eth6, inner6)), key6, 0x86dd, datapath.TunnelVXLAN, v4mapped(nodeA), v4mapped(nodeB), 1},
		{"geneve ethernet inside, options", udp4(6081, packet.Cat(geneve(0xabcdef, 0x6558, 2), eth4, inner4)), key4, 0x0800, datapath.TunnelGeneve, v4mapped(nodeA), v4mapped(nodeB), 0xabcdef},
		{"geneve ipv6 inside", udp4(6081, packet.Cat(geneve(7, 0x86dd, 0), inner6)), key6, 0x86dd, datapath.TunnelGeneve, v4mapped(nodeA), v4mapped(nodeB), 7},
		{"ipip 4in4", packet.Cat(eth4, packet.IPv4(4, nodeA, nodeB, len(inner4)), inner4), key4, 0x0800, datapath.TunnelIPIP, v4mapped(nodeA), v4mapped(nodeB), 0},
		{"sit 6in4", packet.Cat(eth4, packet.IPv4(41, nodeA, nodeB, len(inner6)), inner6), key6, 0x86dd, datapath.TunnelIPIP, v4mapped(nodeA), v4mapped(nodeB), 0},
		{"ip6tnl 4in6", packet.Cat(eth6, packet.IPv6(4, node6A, node6B, len(inner4)), inner4), key4, 0x0800, datapath.TunnelIPIP, mapped(node6A), mapped(node6B), 0},
		{"vxlan over ipv6", packet.Cat(eth6, packet.IPv6(packet.ProtoUDP, node6A, node6B, 8+8+14+len(inner4)),
			packet.UDP(51000, 4789, 8+14+len(inner4))[:packet.UDPLen], vxlan(9), eth4, inner4), key4, 0x0800, datapath.TunnelVXLAN, mapped(node6A), mapped(node6B), 9},
		{"802.1Q vxlan", packet.Cat(packet.Eth(packet.EtherTypeIPv4, packet.Dot1Q(9)), packet.IPv4(packet.ProtoUDP, nodeA, nodeB, 8+8+14+len(inner4)), packet.UDP(51000, 4789, 8+14+len(inner4))[:packet.UDPLen], vxlan(5), eth4, inner4), key4, 0x0800, datapath.TunnelVXLAN, v4mapped(nodeA), v4mapped(nodeB), 5},
		// Kept on the outer key: no tunnel to read through.
		{"vxlan without the I flag", udp4(4789, packet.Cat([]byte{0, 0, 0, 0, 0, 0, 42, 0}, eth4, inner4)), outer(4789), 0x0800, 0, [16]byte{}, [16]byte{}, 0},
		{"arp inside vxlan", udp4(4789, packet.Cat(vxlan(42), arp)), outer(4789), 0x0800, 0, [16]byte{}, [16]byte{}, 0},
		{"geneve version 1", udp4(6081, packet.Cat([]byte{0x40, 0, 0x65, 0x58, 0, 0, 1, 0}, eth4, inner4)), outer(6081), 0x0800, 0, [16]byte{}, [16]byte{}, 0},
		{"truncated inner header", udp4(4789, packet.Cat(vxlan(42), eth4, inner4[:12])), outer(4789), 0x0800, 0, [16]byte{}, [16]byte{}, 0},
		{"gre is not read through", packet.Cat(eth4, packet.IPv4(packet.ProtoGRE, nodeA, nodeB, 4+len(inner4)), packet.GRE(packet.EtherTypeIPv4), inner4),
			datapath.FlowKey{SrcIp: v4mapped(nodeA), DstIp: v4mapped(nodeB), Proto: packet.ProtoGRE}, 0x0800, 0, [16]byte{}, [16]byte{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1, Enrichment: true,
				TCConstants: map[string]any{"overlay_on": uint32(1)}})
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			defer dp.Close()
			pkt := packet.Pad(tc.pkt)
			progs, err := dp.ProgramsFor(testCookie)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := progs.Ingress.Run(&ebpf.RunOptions{Data: pkt, Repeat: repeat}); err != nil {
				t.Fatal(err)
			}
			es := flows(t, dp)
			if len(es) != 1 {
				t.Fatalf("%d flows, want 1: %+v", len(es), es)
			}
			e := es[0]
			tc.key.Zone = loZone(t, dp) // test-run packets are on loopback
			if e.k != tc.key {
				t.Fatalf("key %+v, want %+v", e.k, tc.key)
			}
			if e.v.Packets != repeat || e.v.Bytes != uint64(repeat*len(pkt)) || e.v.EthType != tc.ethType {
				t.Fatalf("packets %d bytes %d eth type %#x, want %d, %d, %#x", e.v.Packets, e.v.Bytes, e.v.EthType, repeat, repeat*len(pkt), tc.ethType)
			}
			var ev datapath.EnrichValue
			err = dp.Maps.Enrich[0].Lookup(&tc.key, &ev)
			if tc.tunType == 0 {
				if err == nil && ev.TunType != 0 {
					t.Fatalf("tunnel recorded for a packet not read through: %+v", ev)
				}
				return
			}
			if err != nil {
				t.Fatalf("no enrichment entry for the inner flow: %v", err)
			}
			if ev.TunType != tc.tunType || ev.TunSrc != tc.src || ev.TunDst != tc.dst || ev.TunVni != tc.vni {
				t.Fatalf("tunnel %d %x -> %x vni %d, want %d %x -> %x vni %d", ev.TunType, ev.TunSrc, ev.TunDst, ev.TunVni,
					tc.tunType, tc.src, tc.dst, tc.vni)
			}
		})
	}
}

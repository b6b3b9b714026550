package datapath_test

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// With overlay_outer_on (--overlay-outer-flows) a packet read through a
// tunnel is also counted in its outer flow's entry of tunnel_outer_a/_b,
// exactly (packets, frame bytes, type, VNI, the observation), at the
// first interface and direction that saw it only; a packet not read
// through (ARP inside VXLAN) is not: it is in the flow map, on its outer
// key. Without the option the maps hold nothing.
func TestTunnelOuterFlows(t *testing.T) {
	needBPF(t)
	const (
		podA, podB   = "10.244.1.2", "10.244.2.3"
		nodeA, nodeB = "192.168.50.1", "192.168.50.2"
		repeat       = 7
	)
	eth4 := packet.Eth(packet.EtherTypeIPv4)
	inner := packet.Cat(packet.IPv4(packet.ProtoUDP, podA, podB, 8+32), packet.UDP(40000, 5000, 32))
	vxlan := []byte{0x08, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(vxlan[4:], 42<<8)
	frame := func(body []byte) []byte {
		return packet.Pad(packet.Cat(eth4, packet.IPv4(packet.ProtoUDP, nodeA, nodeB, 8+len(body)), packet.UDP(51000, 4789, len(body))[:packet.UDPLen], body))
	}
	pkt := frame(packet.Cat(vxlan, eth4, inner))
	arp := frame(packet.Cat(vxlan, packet.Eth(packet.EtherTypeARP), make([]byte, 28)))
	outer := datapath.FlowKey{SrcIp: v4mapped(nodeA), DstIp: v4mapped(nodeB), SrcPort: 51000, DstPort: 4789, Proto: 17}
	innerKey := datapath.FlowKey{SrcIp: v4mapped(podA), DstIp: v4mapped(podB), SrcPort: 40000, DstPort: 5000, Proto: 17}

	for _, on := range []bool{true, false} {
		consts := map[string]any{"overlay_on": uint32(1)}
		sizes := map[string]uint32{}
		if on {
			consts[datapath.OverlayOuterConstant] = uint32(1)
			for _, m := range datapath.OverlayOuterMaps {
				sizes[m] = 64
			}
		}
		dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1, Enrichment: true, TCConstants: consts, MapSizes: sizes})
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		progs, err := dp.ProgramsFor(testCookie)
		if err != nil {
			t.Fatal(err)
		}
		for _, run := range []struct {
			p *ebpf.Program
			b []byte
		}{{progs.Ingress, pkt}, {progs.Egress, pkt}, {progs.Ingress, arp}} {
			if _, err := run.p.Run(&ebpf.RunOptions{Data: run.b, Repeat: repeat}); err != nil {
				t.Fatal(err)
			}
		}
		// The flow map: the inner flow (its egress on the same interface
		// is only listed: counted once) and ARP's outer key, as without
		// the option.
		got := map[datapath.FlowKey]uint64{}
		for _, e := range flows(t, dp) {
			got[e.k] = e.v.Packets
		}
		// Test-run packets are on loopback: the flow map's keys have its
		// zone; the tunnel flow's key is taken before the zone is set
		// (tunnels never run over a loopback device), so it has none.
		zone := loZone(t, dp)
		innerZ, outerZ := innerKey, outer
		innerZ.Zone, outerZ.Zone = zone, zone
		if len(got) != 2 || got[innerZ] != repeat || got[outerZ] != repeat {
			t.Errorf("on=%v: flow map %v, want the inner flow %d packets and the outer key %d (ARP)", on, got, repeat, repeat)
		}
		var ks []datapath.FlowKey
		var vs []datapath.TunnelOuterValue
		it := dp.Maps.TunnelOuter[0].Iterate()
		var k datapath.FlowKey
		var v datapath.TunnelOuterValue
		for it.Next(&k, &v) {
			ks, vs = append(ks, k), append(vs, v)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		dp.Close()
		if !on {
			if len(ks) != 0 {
				t.Errorf("option off: %d tunnel flows, want 0", len(ks))
			}
			continue
		}
		if len(ks) != 1 || ks[0] != outer {
			t.Fatalf("tunnel flows %+v, want one, %+v", ks, outer)
		}
		v = vs[0]
		// The egress runs are another observation: not added.
		if v.Packets != repeat || v.Bytes != uint64(repeat*len(pkt)) || v.Type != datapath.TunnelVXLAN || v.Vni != 42 ||
			v.Obs.Dir != datapath.DirIngress || v.FirstSeen == 0 || v.LastSeen < v.FirstSeen {
			t.Errorf("tunnel flow %+v, want %d packets, %d bytes, vxlan 42, ingress", v, repeat, repeat*len(pkt))
		}
	}
}

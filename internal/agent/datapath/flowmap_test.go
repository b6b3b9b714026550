package datapath_test

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// The two families' flow maps (flowmap.go, bpf/flowmap.h): IPv4 and IPv6
// flows each in their own map of a generation, both read back by the
// evictor's path exactly (packets and bytes as the programs were run), and
// a full IPv4 map counted (the overflow ring, its own full slot) while IPv6
// flows still insert, and the reverse.
func TestFlowMapFamilies(t *testing.T) {
	needBPF(t)
	dp := load(t, 2) // 2 entries in each map
	gens, err := datapath.NewGenerations(&dp.Maps, nil)
	if err != nil {
		t.Fatal(err)
	}
	gen := gens.Generation()
	udp4 := func(sport uint16) []byte {
		return packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(packet.ProtoUDP, "10.0.0.1", "10.0.0.2", 8), packet.UDP(sport, 53, 0))
	}
	udp6 := func(src, dst string, sport uint16) []byte {
		return packet.Cat(packet.Eth(packet.EtherTypeIPv6), packet.IPv6(packet.ProtoUDP, src, dst, 8), packet.UDP(sport, 53, 0))
	}
	type sent struct {
		key            datapath.FlowKey
		packets, bytes uint64
	}
	var want []sent
	send := func(frame []byte, src, dst [16]byte, sport uint16, n uint32) {
		runPkt(t, dp, frame, n)
		want = append(want, sent{datapath.FlowKey{SrcIp: src, DstIp: dst, SrcPort: sport, DstPort: 53, Proto: 17, Zone: 255},
			uint64(n), uint64(n) * uint64(len(frame))})
	}
	// Two IPv4 flows fill the IPv4 map; the third goes to the ring.
	for sport := uint16(1); sport <= 3; sport++ {
		send(udp4(sport), v4mapped("10.0.0.1"), v4mapped("10.0.0.2"), sport, 2)
	}
	// An IPv6 flow inserts although the IPv4 map is full; so does one
	// with one IPv4-mapped address (an IPv6 key: both must be mapped).
	send(udp6("2001:db8::1", "2001:db8::2", 7), mapped("2001:db8::1"), mapped("2001:db8::2"), 7, 3)
	send(udp6("::ffff:10.0.0.1", "2001:db8::2", 8), mapped("::ffff:10.0.0.1"), mapped("2001:db8::2"), 8, 4)
	ctl := func(slot uint32) uint32 {
		var v uint32
		if err := dp.Maps.Control.Lookup(slot, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if f4, f6 := ctl(datapath.ControlFlows4Full), ctl(datapath.ControlFlowsFull); f4 != gen+1 || f6 != 0 {
		t.Errorf("full slots: IPv4 %d, IPv6 %d; want %d (generation %d full) and 0", f4, f6, gen+1, gen)
	}
	// Now the IPv6 map is full too: its third flow goes to the ring.
	send(udp6("2001:db8::3", "2001:db8::2", 9), mapped("2001:db8::3"), mapped("2001:db8::2"), 9, 5)
	if f6 := ctl(datapath.ControlFlowsFull); f6 != gen+1 {
		t.Errorf("IPv6 full slot %d, want %d", f6, gen+1)
	}
	c := counters(t, dp)
	if c[datapath.CounterNewFlows] != 4 || c[datapath.CounterOverflowRecords] != 2+5 || c[datapath.CounterOverflowLost] != 0 {
		t.Errorf("new flows %d, overflow records %d, lost %d; want 4, 7, 0",
			c[datapath.CounterNewFlows], c[datapath.CounterOverflowRecords], c[datapath.CounterOverflowLost])
	}
	n4, n6 := 0, 0
	var k4 datapath.FlowKey4
	for it := dp.Maps.Flows4[gen&1].Iterate(); it.Next(&k4, new(datapath.FlowValue4)); {
		n4++
	}
	var k6 datapath.FlowKey
	for it := dp.Maps.Flows[gen&1].Iterate(); it.Next(&k6, new(datapath.FlowValue)); {
		n6++
		if _, v4 := datapath.Key4(&k6); v4 {
			t.Errorf("IPv4 key %v in the IPv6 map", k6)
		}
	}
	if n4 != 2 || n6 != 2 {
		t.Errorf("IPv4 map %d entries, IPv6 map %d; want 2 and 2", n4, n6)
	}

	// The evictor's read of the ended generation: every flow in a map,
	// under its FlowKey, with exactly what was sent.
	ended, err := gens.Flip()
	if err != nil {
		t.Fatal(err)
	}
	got := map[datapath.FlowKey]datapath.FlowValue{}
	if _, err := ended.ReadFlows(func(keys []datapath.FlowKey, vals []datapath.FlowValue) error {
		for i := range keys {
			got[keys[i]] = vals[i]
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Errorf("%d flows read, want 4: %v", len(got), got)
	}
	for i, w := range want {
		if i == 2 || i == 5 { // the ring's (checked by count above)
			continue
		}
		v, ok := got[w.key]
		if !ok || v.Packets != w.packets || v.Bytes != w.bytes {
			t.Errorf("flow %d (%v): found %v, %d packets, %d bytes; want %d, %d", i, w.key, ok, v.Packets, v.Bytes, w.packets, w.bytes)
		}
	}
}

// Key4 and KeyOf4 are each other's inverse, and Key4 takes only keys whose
// two addresses are IPv4-mapped (bpf/flowmap.h, fm_key4, the same test).
func TestKey4(t *testing.T) {
	k := datapath.FlowKey{SrcIp: v4mapped("10.1.2.3"), DstIp: v4mapped("192.168.0.9"), SrcPort: 1234, DstPort: 80,
		Proto: 1, IcmpType: 8, IcmpCode: 3, Zone: 7}
	k4, ok := datapath.Key4(&k)
	if !ok || datapath.KeyOf4(&k4) != k {
		t.Fatalf("Key4(%v) = %v, %v; back: %v", k, k4, ok, datapath.KeyOf4(&k4))
	}
	for _, c := range [][2]string{{"2001:db8::1", "10.0.0.1"}, {"10.0.0.1", "2001:db8::1"}, {"::10.0.0.1", "10.0.0.2"}} {
		k := datapath.FlowKey{SrcIp: mapped(c[0]), DstIp: mapped(c[1])} // As16: an IPv4 address mapped
		if _, ok := datapath.Key4(&k); ok {
			t.Errorf("%s -> %s: an IPv4 key", c[0], c[1])
		}
	}
}


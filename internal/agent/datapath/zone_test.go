package datapath_test

import (
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// loZone is the zone dp's programs give a test-run packet (BPF_PROG_TEST_RUN
// hands them the caller's loopback device).
func loZone(t *testing.T, dp *datapath.Datapath) uint8 {
	t.Helper()
	z, err := dp.Maps.Zone(datapath.LoopbackIfindex, runNetns(t, dp))
	if err != nil {
		t.Fatal(err)
	}
	return z
}

// A loopback packet's zone is its namespace's, exactly as the agent wrote
// it: from the namespace's slot, from the spill map when another namespace
// holds the slot (cookies congruent mod the slots), and ZoneLoNone for a
// namespace given none; a namespace's non-loopback zone is 0 until the
// several-domains flag is set. Each run's flow carries the zone Maps.Zone
// reads, so the tests that build keys with it build the kernel's.
func TestZonesOfLoopbackPackets(t *testing.T) {
	needBPF(t)
	dp := load(t, 64)
	me := runNetns(t, dp)
	frame := func(sport uint16) []byte {
		return packet.Cat(packet.Eth(packet.EtherTypeIPv4),
			packet.IPv4(packet.ProtoUDP, "127.0.0.1", "127.0.0.1", packet.UDPLen+4), packet.UDP(sport, 8080, 4))
	}
	zoneOf := func(sport uint16) uint8 {
		t.Helper()
		for _, e := range flows(t, dp) {
			if e.k.SrcPort == sport {
				return e.k.Zone
			}
		}
		t.Fatalf("no flow from port %d", sport)
		return 0
	}
	check := func(step string, sport uint16, want uint8) {
		t.Helper()
		runPkt(t, dp, frame(sport), 1)
		got := zoneOf(sport)
		read, err := dp.Maps.Zone(datapath.LoopbackIfindex, me)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: zone %d (Maps.Zone %d)", step, got, read)
		if got != want || read != want {
			t.Errorf("%s: kernel zone %d, Maps.Zone %d, want %d", step, got, read, want)
		}
	}
	check("no zone written", 1000, datapath.ZoneLoNone)
	if err := dp.Maps.SetZones(me, datapath.Zones{Domain: 3, Lo: 9}); err != nil {
		t.Fatal(err)
	}
	check("in its slot", 1001, 9)

	// Another namespace whose cookie is congruent takes the slot first:
	// this one goes to the spill map, and keeps its own zone.
	other := me + 4096
	if err := dp.Maps.DeleteZones(me); err != nil {
		t.Fatal(err)
	}
	check("deleted", 1002, datapath.ZoneLoNone)
	if err := dp.Maps.SetZones(other, datapath.Zones{Domain: 4, Lo: 11}); err != nil {
		t.Fatal(err)
	}
	check("slot held by another", 1003, datapath.ZoneLoNone)
	if err := dp.Maps.SetZones(me, datapath.Zones{Domain: 3, Lo: 12}); err != nil {
		t.Fatal(err)
	}
	check("spilled", 1004, 12)
	if z, err := dp.Maps.Zone(datapath.LoopbackIfindex, other); err != nil || z != 11 {
		t.Errorf("the slot's holder: zone %d (%v), want 11", z, err)
	}
	// The slot frees: the spilled namespace moves in, its zone unchanged.
	if err := dp.Maps.DeleteZones(other); err != nil {
		t.Fatal(err)
	}
	check("slot freed", 1005, 12)
	if err := dp.Maps.SetZones(me, datapath.Zones{Domain: 3, Lo: 13}); err != nil {
		t.Fatal(err)
	}
	check("moved into its slot", 1006, 13)
	var spilled uint64
	var s datapath.ZoneSlot
	if err := dp.Maps.ZoneSpill.Lookup(me, &s); err == nil {
		spilled = s.Netns
	}
	if spilled != 0 {
		t.Errorf("namespace %d still in the spill map after moving into its slot", me)
	}

	// Non-loopback devices: 0 with one domain, the namespace's with several.
	for _, tc := range []struct {
		several bool
		want    uint8
	}{{false, 0}, {true, 3}} {
		if err := dp.Maps.SetSeveralDomains(tc.several); err != nil {
			t.Fatal(err)
		}
		if z, err := dp.Maps.Zone(5, me); err != nil || z != tc.want {
			t.Errorf("several domains %v: non-loopback zone %d (%v), want %d", tc.several, z, err, tc.want)
		}
		// The flag does not touch loopback packets.
		check("flag", 1007+uint16(tc.want), 13)
	}
}

package agent

import (
	"io"
	"log/slog"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
)

// step runs assign over the links given (namespace -> its peers; 0:
// outside) as update would, and records the zones as written.
func (z *zoner) step(links map[uint64][]uint64, lo ...uint64) (map[uint64]datapath.Zones, bool) {
	for c := range z.ns {
		if _, ok := links[c]; !ok {
			delete(z.ns, c)
		}
	}
	for c, p := range links {
		if z.ns[c] == nil {
			z.ns[c] = &zoneNs{}
		}
		z.ns[c].peers = p
	}
	for _, c := range lo {
		z.ns[c].lo = true
	}
	out, several := z.assign()
	for c, zs := range out {
		z.ns[c].z, z.ns[c].written = zs, true
	}
	return out, several
}

// The zones' assignment: components of the link graph (a link outside
// joins every namespace with one), zone 0 for the main domain and kept as
// others come and go, a new domain never takes a live or recently freed
// zone, loopback zones exact and stable, and when ids run out the rest
// share zone 0 (domains) or 255 (loopback), never another's id.
func TestZoneAssignment(t *testing.T) {
	z := &zoner{log: slog.New(slog.NewTextHandler(io.Discard, nil)), host: 1, ns: map[uint64]*zoneNs{}}
	// The host (1) with two pods (2, 3) and a link outside; one island (4, 5).
	got, several := z.step(map[uint64][]uint64{1: {2, 3, 0}, 2: {1}, 3: {1}, 4: {5}, 5: {4}}, 2, 4)
	if !several || got[1].Domain != 0 || got[2].Domain != 0 || got[3].Domain != 0 || got[4].Domain == 0 || got[4].Domain != got[5].Domain {
		t.Fatalf("domains %v (several %v): want 1, 2, 3 in 0 and 4, 5 in another", got, several)
	}
	if got[2].Lo == datapath.ZoneLoNone || got[4].Lo == datapath.ZoneLoNone || got[2].Lo == got[4].Lo ||
		got[2].Lo == got[4].Domain || got[4].Lo == got[4].Domain || got[1].Lo != datapath.ZoneLoNone {
		t.Fatalf("loopback zones %v: want 2 and 4 each its own, 1 none (its lo not watched)", got)
	}
	islandZone, lo2 := got[4].Domain, got[2].Lo

	// A second island (6, 7) and an isolated namespace (8) appear: both
	// new zones, nothing else moves.
	got, _ = z.step(map[uint64][]uint64{1: {2, 3, 0}, 2: {1}, 3: {1}, 4: {5}, 5: {4}, 6: {7}, 7: {6}, 8: nil}, 2, 4)
	if got[4].Domain != islandZone || got[2].Lo != lo2 || got[1].Domain != 0 {
		t.Fatalf("zones moved: %v", got)
	}
	seen := map[uint8]bool{0: true, islandZone: true, got[2].Lo: true, got[4].Lo: true}
	for _, c := range []uint64{6, 8} {
		if seen[got[c].Domain] {
			t.Fatalf("namespace %d got zone %d, already taken: %v", c, got[c].Domain, got)
		}
		seen[got[c].Domain] = true
	}
	gone := got[6].Domain

	// The first island goes; a third (9, 10) takes none of the live zones
	// nor the one just freed.
	got, _ = z.step(map[uint64][]uint64{1: {2, 3, 0}, 2: {1}, 3: {1}, 6: {7}, 7: {6}, 8: nil, 9: {10}, 10: {9}}, 2)
	if got[9].Domain == 0 || got[9].Domain == islandZone || got[9].Domain == gone || got[9].Domain == got[8].Domain {
		t.Fatalf("new island in zone %d: taken or freed just now: %v", got[9].Domain, got)
	}
	// A link joins namespace 8 to the host's domain: it moves to 0, the
	// host's domain stays 0; the flag follows the number of domains.
	got, several = z.step(map[uint64][]uint64{1: {2, 3, 0, 8}, 2: {1}, 3: {1}, 8: {1}}, 2)
	if several || got[8].Domain != 0 || got[1].Domain != 0 {
		t.Fatalf("one domain: zones %v, several %v", got, several)
	}

	// Ids run out: 300 isolated namespaces with a watched lo. Every id
	// handed out is distinct; the rest share 0 or 255.
	links := map[uint64][]uint64{1: {0}}
	var los []uint64
	for c := uint64(100); c < 400; c++ {
		links[c] = nil
		los = append(los, c)
	}
	got, _ = z.step(links, los...)
	owner := map[uint8]uint64{}
	shared := 0
	for c, zs := range got {
		for _, id := range []uint8{zs.Domain, zs.Lo} {
			if id == 0 || id == datapath.ZoneLoNone {
				continue
			}
			if o, ok := owner[id]; ok && o != c {
				t.Fatalf("zone %d given to both %d and %d", id, o, c)
			}
			owner[id] = c
		}
		if c != 1 && (zs.Domain == 0 || zs.Lo == datapath.ZoneLoNone) {
			shared++
		}
	}
	t.Logf("300 namespaces with their lo: %d ids handed out, %d namespaces share 0 or 255", len(owner), shared)
	if len(owner) != 254 {
		t.Errorf("%d ids handed out, want all 254", len(owner))
	}
}

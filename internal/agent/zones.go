package agent

import (
	"cmp"
	"errors"
	"log/slog"
	"slices"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
)

// zoner gives the watched namespaces their zones (bpf/zone.h; the rule and
// its proof: docs/design/counting.md, "Namespaces, zones and what the agent
// watches"). A namespace's domain zone is its address domain's: the
// connected component of the graph of the watched namespaces and the links
// a packet can cross between them (ifaces.NetnsPeers; a link into a
// namespace not watched joins the one "outside" node). A namespace whose
// loopback device is watched has a zone of its own for it. Zones stay put
// across recomputations where they can: the domain with the most members
// already in zone 0 keeps 0 (so that a second domain appearing never moves
// a node's main one), another keeps the zone most of its members had.
// Only the Run loop touches it.
type zoner struct {
	maps    *datapath.Maps
	log     *slog.Logger
	host    uint64 // the agent's own namespace's cookie
	ns      map[uint64]*zoneNs
	several bool
	dirty   bool  // a namespace's links changed, or one may be gone
	recheck bool  // some namespace may be gone
	warned  bool  // the ids ran out (said once)
	last    uint8 // the last id handed out
}

type zoneNs struct {
	name, path string
	peers      []uint64 // from the last read of its links (0: outside)
	stale      bool     // its links must be read again
	lo         bool     // its loopback device is watched: it has a zone of its own
	z          datapath.Zones
	written    bool
}

// zoneIDs are the zones the agent hands out, 1..254: 0 is the main
// domain's, datapath.ZoneLoNone a loopback device's in a namespace given
// none.
const zoneFirst, zoneLast = 1, 254

func newZoner(maps *datapath.Maps, log *slog.Logger) *zoner {
	host, err := ifaces.NetnsCookie("")
	if err != nil {
		log.Warn("no netns cookie for the agent's namespace: zones off (loopback and overlapping tuples of several namespaces may share flows)", "error", err)
		return nil
	}
	return &zoner{maps: maps, log: log, host: host, ns: map[uint64]*zoneNs{}}
}

// seen notes an interface that appeared (attached or excluded): its
// namespace's links are read again at the next update.
func (z *zoner) seen(it ifaces.Interface, watchedLo bool) {
	if z == nil || it.NetnsCookie == 0 {
		return
	}
	n := z.ns[it.NetnsCookie]
	if n == nil {
		// A link into a namespace not known until now led "outside":
		// it may lead here.
		for _, o := range z.ns {
			o.stale = o.stale || slices.Contains(o.peers, 0)
		}
		n = &zoneNs{name: it.Netns, path: it.NetnsPath}
		z.ns[it.NetnsCookie] = n
	}
	n.stale = true
	if watchedLo && it.Index == datapath.LoopbackIfindex {
		n.lo = true
	}
	z.dirty = true
}

// gone notes an interface that went away: its namespace may be gone too.
func (z *zoner) gone(it ifaces.Interface) {
	if z == nil {
		return
	}
	if n := z.ns[it.NetnsCookie]; n != nil {
		n.stale = true
	}
	z.dirty, z.recheck = true, true
}

// update recomputes the zones if something changed and writes those that
// moved: the namespaces' slots first, then the several-domains flag.
func (z *zoner) update() {
	if z == nil || !z.dirty {
		return
	}
	z.dirty = false
	var errs []error
	// forget drops a namespace that is gone (or whose name now binds
	// another one) and reports whether it did.
	forget := func(c uint64, n *zoneNs) bool {
		if cur, err := ifaces.NetnsCookie(n.path); err == nil && cur == c {
			return false
		}
		delete(z.ns, c)
		if n.written {
			errs = append(errs, z.maps.DeleteZones(c))
		}
		return true
	}
	if z.recheck {
		z.recheck = false
		for c, n := range z.ns {
			forget(c, n)
		}
	}
	known := make(map[uint64]string, len(z.ns))
	for c, n := range z.ns {
		known[c] = n.path
	}
	for c, n := range z.ns {
		if !n.stale {
			continue
		}
		peers, err := ifaces.NetnsPeers(n.path, known)
		if err != nil {
			if !forget(c, n) {
				errs = append(errs, err) // keeps its last links; read again next time
			}
			continue
		}
		n.peers, n.stale = peers, false
	}
	domains, several := z.assign()
	for c, n := range z.ns {
		if n.written && n.z == domains[c] {
			continue
		}
		n.z = domains[c]
		if err := z.maps.SetZones(c, n.z); err != nil {
			errs = append(errs, err)
			continue
		}
		n.written = true
	}
	if several != z.several {
		if err := z.maps.SetSeveralDomains(several); err != nil {
			errs = append(errs, err)
		} else {
			z.several = several
			z.log.Info("address domains", "several", several, "namespaces", len(z.ns))
		}
	}
	if err := errors.Join(errs...); err != nil {
		z.log.Warn("zones: some namespaces keep their previous zone", "error", err)
		z.dirty = true // try again at the next event
	}
}

// assign computes every namespace's zones from the links last read and the
// zones they had; several is whether there is more than one domain.
func (z *zoner) assign() (out map[uint64]datapath.Zones, several bool) {
	// Union-find over the namespaces and "outside" (cookie 0).
	parent := map[uint64]uint64{0: 0}
	var find func(uint64) uint64
	find = func(c uint64) uint64 {
		for parent[c] != c {
			parent[c] = parent[parent[c]]
			c = parent[c]
		}
		return c
	}
	for c := range z.ns {
		parent[c] = c
	}
	for c, n := range z.ns {
		for _, p := range n.peers {
			if _, ok := parent[p]; !ok {
				p = 0 // a namespace no longer known
			}
			if a, b := find(c), find(p); a != b {
				parent[a] = b
			}
		}
	}
	comps := map[uint64][]uint64{}
	for c := range z.ns {
		r := find(c)
		comps[r] = append(comps[r], c)
	}
	type comp struct {
		members []uint64
		prev    map[uint8]int // zones its members had
		host    bool
	}
	var list []comp
	for _, m := range comps {
		slices.Sort(m)
		k := comp{members: m, prev: map[uint8]int{}}
		for _, c := range m {
			if n := z.ns[c]; n.written {
				k.prev[n.z.Domain]++
			}
			k.host = k.host || c == z.host
		}
		list = append(list, k)
	}
	// Zone 0 first: the most members already in 0, then the agent's own
	// namespace's domain, then the largest; ties by the smallest cookie.
	slices.SortFunc(list, func(a, b comp) int {
		if a.prev[0] != b.prev[0] {
			return b.prev[0] - a.prev[0]
		}
		if a.host != b.host {
			if a.host {
				return -1
			}
			return 1
		}
		if len(a.members) != len(b.members) {
			return len(b.members) - len(a.members)
		}
		return cmp.Compare(a.members[0], b.members[0])
	})
	// Loopback zones stay where they are.
	used := map[uint8]bool{}
	for _, n := range z.ns {
		if n.lo && n.written && n.z.Lo != datapath.ZoneLoNone {
			used[n.z.Lo] = true
		}
	}
	// New ids go round the range from the last one handed out: a zone
	// freed by a namespace that went away is reused as late as possible,
	// long after the flows keyed with it were evicted.
	next := func() (uint8, bool) {
		for k := 0; k <= zoneLast-zoneFirst; k++ {
			id := uint8(zoneFirst + (int(z.last)-zoneFirst+1+k)%(zoneLast-zoneFirst+1))
			if !used[id] {
				used[id] = true
				z.last = id
				return id, true
			}
		}
		if !z.warned {
			z.warned = true
			z.log.Warn("zones: more than 254 domains and watched loopback devices; the rest share zone 0 (domains) or 255 (loopback)")
		}
		return 0, false
	}
	// The first domain has zone 0; each other keeps the zone most of its
	// members had if no domain before it took it, then the rest get new ones.
	domain := make([]uint8, len(list))
	fresh := make([]bool, len(list))
	for i := 1; i < len(list); i++ {
		best, bestN := uint8(0), 0
		for zone, k := range list[i].prev {
			if zone != 0 && !used[zone] && (k > bestN || k == bestN && zone < best) {
				best, bestN = zone, k
			}
		}
		if bestN == 0 {
			fresh[i] = true
			continue
		}
		used[best] = true
		domain[i] = best
	}
	for i := range list {
		if fresh[i] {
			domain[i], _ = next()
		}
	}
	out = map[uint64]datapath.Zones{}
	for i, k := range list {
		for _, c := range k.members {
			n := z.ns[c]
			lo := datapath.ZoneLoNone
			if n.lo {
				if n.written && n.z.Lo != datapath.ZoneLoNone {
					lo = n.z.Lo
				} else if id, ok := next(); ok {
					lo = id
				}
			}
			out[c] = datapath.Zones{Domain: domain[i], Lo: lo}
		}
	}
	return out, len(list) > 1
}

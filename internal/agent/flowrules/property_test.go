package flowrules

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/ifname"
)

// naive is the reference for the tables: it orders the rules by the
// documented precedence and checks each rule's fields directly against the
// packet, field by field as the package doc words them. It returns the
// winner's index in rules, or -1.
func naive(rules []Rule, p Packet) int {
	plen := func(pr netip.Prefix) int {
		switch {
		case !pr.IsValid():
			return 0
		case pr.Addr().Is4():
			return 96 + pr.Bits()
		}
		return pr.Bits()
	}
	order := make([]int, len(rules))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if d := plen(rules[b].CIDR) - plen(rules[a].CIDR); d != 0 {
			return d
		}
		return plen(rules[b].PeerCIDR) - plen(rules[a].PeerCIDR)
	})
	for _, i := range order {
		if naiveMatch(&rules[i], p) {
			return i
		}
	}
	return -1
}

func naiveMatch(r *Rule, p Packet) bool {
	src, dst := p.Src.Unmap(), p.Dst.Unmap()
	c, peer := r.CIDR, r.PeerCIDR
	switch {
	case c.IsValid() && peer.IsValid():
		if !(c.Contains(src) && peer.Contains(dst) || c.Contains(dst) && peer.Contains(src)) {
			return false
		}
	case c.IsValid():
		if !c.Contains(src) && !c.Contains(dst) {
			return false
		}
	case peer.IsValid():
		if !peer.Contains(src) && !peer.Contains(dst) {
			return false
		}
	}
	if r.Protocol != nil && *r.Protocol != p.Proto {
		return false
	}
	portProto := p.Proto == 6 || p.Proto == 17 || p.Proto == 132
	in := func(rs []PortRange, port uint16) bool {
		for _, x := range rs {
			if x.First <= port && port <= x.Last {
				return true
			}
		}
		return false
	}
	if len(r.Ports)+len(r.SourcePorts)+len(r.DestinationPorts) > 0 {
		if !portProto ||
			len(r.Ports) > 0 && !in(r.Ports, p.SrcPort) && !in(r.Ports, p.DstPort) ||
			len(r.SourcePorts) > 0 && !in(r.SourcePorts, p.SrcPort) ||
			len(r.DestinationPorts) > 0 && !in(r.DestinationPorts, p.DstPort) {
			return false
		}
	}
	if r.ICMPType != nil || r.ICMPCode != nil {
		if p.Proto != 1 && p.Proto != 58 ||
			r.ICMPType != nil && *r.ICMPType != p.ICMPType ||
			r.ICMPCode != nil && *r.ICMPCode != p.ICMPCode {
			return false
		}
	}
	if len(r.TCPFlags) > 0 {
		if p.Proto != 6 {
			return false
		}
		ok := false
		for _, f := range r.TCPFlags {
			ok = ok || uint8(f)&p.TCPFlags == uint8(f)
		}
		if !ok {
			return false
		}
	}
	if r.Direction != AnyDirection && r.Direction != p.Direction {
		return false
	}
	if len(r.Interfaces) > 0 {
		s, _ := ifname.Compile(r.Interfaces)
		if !s.Match(p.Interface) {
			return false
		}
	}
	return true
}

// Pools of values near one another, so that random rules overlap and random
// packets hit their edges.
var (
	v4Prefixes = []string{"0.0.0.0/0", "10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.3/32", "10.1.3.0/24",
		"10.2.0.0/16", "192.168.0.0/16", "10.1.2.2/31", "8.0.0.0/7"}
	// ::/1 and ::/64 cover ::ffff:0:0/96 bit for bit: they must not match IPv4.
	v6Prefixes = []string{"::/0", "::/1", "::/64", "fd00::/8", "fd00:1::/32", "fd00:1:2::/48", "fd00:1:2::3/128",
		"fd00:2::/32", "fd00:1:2::2/127", "2001:db8::/32"}
	v4Addrs = []string{"10.1.2.3", "10.1.2.2", "10.1.2.4", "10.1.3.1", "10.2.0.1", "10.9.9.9", "192.168.1.1",
		"8.8.8.8", "9.255.255.255", "0.0.0.0", "255.255.255.255"}
	v6Addrs = []string{"fd00:1:2::3", "fd00:1:2::2", "fd00:1:2::4", "fd00:1:3::1", "fd00:2::1", "fd01::1",
		"2001:db8::1", "::1", "::", "::a00:1", "ffff::1"}
	portPool   = []uint16{0, 1, 53, 79, 80, 81, 100, 443, 1000, 1024, 8080, 10256, 65534, 65535}
	protocols  = []uint8{TCP, UDP, SCTP, ICMP, ICMPv6, 47, 0}
	icmpValues = []uint8{0, 3, 8, 128, 129, 255}
	ifaceLists = [][]string{{"eth0"}, {"/^veth/"}, {"eth0", "/^br-/"}, {"lo"}}
	ifaceNames = []string{"eth0", "veth3", "br-x", "lo", "eth1"}
)

func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

func randomPrefix(rng *rand.Rand, v6 bool) netip.Prefix {
	pool, addrs := v4Prefixes, v4Addrs
	if v6 {
		pool, addrs = v6Prefixes, v6Addrs
	}
	if rng.IntN(4) == 0 { // an address's own prefix at a random length
		a := netip.MustParseAddr(pick(rng, addrs))
		p, _ := a.Prefix(rng.IntN(a.BitLen() + 1))
		return p
	}
	return netip.MustParsePrefix(pick(rng, pool))
}

func randomPorts(rng *rand.Rand) []PortRange {
	rs := make([]PortRange, 1+rng.IntN(3))
	for i := range rs {
		a, b := pick(rng, portPool), pick(rng, portPool)
		if rng.IntN(3) == 0 {
			b = a
		}
		rs[i] = PortRange{min(a, b), max(a, b)}
	}
	return rs
}

// randomRule gives a rule that uses a random few of the fields; it may fail
// Check (e.g. ports with protocol icmp), and the caller draws again.
func randomRule(rng *rand.Rand) Rule {
	r := Rule{Action: Action(1 + rng.IntN(2))}
	some := func() bool { return rng.IntN(4) == 0 }
	v6 := rng.IntN(2) == 0
	if rng.IntN(2) == 0 {
		r.CIDR = randomPrefix(rng, v6)
	}
	if some() {
		r.PeerCIDR = randomPrefix(rng, v6)
	}
	if some() {
		r.Protocol = ptr(pick(rng, protocols))
	}
	if some() {
		r.Ports = randomPorts(rng)
	}
	if some() {
		r.SourcePorts = randomPorts(rng)
	}
	if some() {
		r.DestinationPorts = randomPorts(rng)
	}
	if some() {
		r.ICMPType = ptr(pick(rng, icmpValues))
		if rng.IntN(2) == 0 {
			r.ICMPCode = ptr(pick(rng, icmpValues))
		}
	}
	if some() {
		r.TCPFlags = make([]TCPFlags, 1+rng.IntN(3))
		for i := range r.TCPFlags {
			r.TCPFlags[i] = pick(rng, flagNames).flags
			if rng.IntN(4) == 0 {
				r.TCPFlags[i] = TCPFlags(1 + rng.IntN(255))
			}
		}
	}
	if some() {
		r.Direction = Direction(1 + rng.IntN(2))
	}
	if some() {
		r.Interfaces = pick(rng, ifaceLists)
	}
	if r.Action == Accept && some() {
		r.Drops = true
		r.Sampling = uint32(rng.IntN(3))
	}
	return r
}

func randomPacket(rng *rand.Rand) Packet {
	addrs := v4Addrs
	if rng.IntN(2) == 0 {
		addrs = v6Addrs
	}
	p := Packet{
		Src: netip.MustParseAddr(pick(rng, addrs)), Dst: netip.MustParseAddr(pick(rng, addrs)),
		Proto:   pick(rng, protocols),
		SrcPort: pick(rng, portPool), DstPort: pick(rng, portPool),
		ICMPType: pick(rng, icmpValues), ICMPCode: pick(rng, icmpValues),
		TCPFlags:  uint8(rng.IntN(256)),
		Direction: Direction(1 + rng.IntN(2)),
		Interface: pick(rng, ifaceNames),
	}
	if rng.IntN(8) == 0 {
		p.SrcPort = uint16(rng.IntN(65536))
	}
	if rng.IntN(4) == 0 {
		p.Src, p.Dst = netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("10.1.2.2")
	}
	return p
}

func randomRules(rng *rand.Rand) []Rule {
	n := 1 + rng.IntN(8)
	if rng.IntN(4) == 0 {
		n = 1 + rng.IntN(MaxRules)
	}
	rules := make([]Rule, 0, n)
	for len(rules) < n {
		r := randomRule(rng)
		if Check([]Rule{r}) == nil {
			rules = append(rules, r)
		}
	}
	return rules
}

// TestMatchAgreesWithNaive is the property that makes Match (and the kernel
// tested against it) trustworthy: on random rule lists and random packets,
// the bitmap formula picks the same rule as checking the rules one by one.
func TestMatchAgreesWithNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 2026))
	var matched, unmatched, notFirst int
	for range 3000 {
		rules := randomRules(rng)
		tab, err := Compile(rules, Reject)
		if err != nil {
			t.Fatal(err)
		}
		for range 200 {
			p := randomPacket(rng)
			want := naive(rules, p)
			if got := winner(tab, p); got != want {
				t.Fatalf("rules %+v\npacket %+v\nMatch: rule %d, naive: rule %d", rules, p, got, want)
			}
			switch {
			case want < 0:
				unmatched++
			case want > 0:
				notFirst++
				fallthrough
			default:
				matched++
			}
		}
	}
	// The property means little if the random cases never exercise it.
	t.Logf("%d packets matched (%d not by the first rule), %d unmatched", matched, notFirst, unmatched)
	if matched < 100_000 || unmatched < 100_000 || notFirst < 50_000 {
		t.Errorf("too few interesting cases: %d matched (%d not first), %d unmatched", matched, notFirst, unmatched)
	}
}

// TestPortRunsAreExact expands the port runs of random tables and checks
// every port against the rules.
func TestPortRunsAreExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 65536))
	for range 20 {
		rules := randomRules(rng)
		tab, err := Compile(rules, Reject)
		if err != nil {
			t.Fatal(err)
		}
		next := 0
		for _, r := range tab.Ports {
			if int(r.First) != next || r.Last < r.First {
				t.Fatalf("runs %+v do not tile 0-65535", tab.Ports)
			}
			next = int(r.Last) + 1
		}
		if next != 65536 {
			t.Fatalf("runs %+v end at %d", tab.Ports, next-1)
		}
		for port := range 65536 {
			src, dst, any := tab.PortBits(uint16(port))
			var wsrc, wdst, wany uint64
			for i, r := range tab.Rules {
				if len(r.SourcePorts) == 0 || inPorts(r.SourcePorts, uint16(port)) {
					wsrc |= 1 << i
				}
				if len(r.DestinationPorts) == 0 || inPorts(r.DestinationPorts, uint16(port)) {
					wdst |= 1 << i
				}
				if inPorts(r.Ports, uint16(port)) {
					wany |= 1 << i
				}
			}
			if src != wsrc || dst != wdst || any != wany {
				t.Fatalf("port %d: %b %b %b, want %b %b %b", port, src, dst, any, wsrc, wdst, wany)
			}
		}
	}
}

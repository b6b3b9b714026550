package datapath

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/flowrules"
)

// The IPv4 multibit trie gives every address the bits the LPM trie (the
// Go reference, Table.AddrBits) gives it, with nested prefixes of every
// length class (/8 to /16, /17 to /24, /25 to /32).
func TestV4TableMatchesLPM(t *testing.T) {
	rules, err := flowrules.Parse([]byte(`
- {action: accept, cidr: 10.0.0.0/8}
- {action: accept, cidr: 10.1.0.0/16, peer_cidr: 192.160.0.0/12}
- {action: reject, cidr: 10.1.2.0/23}
- {action: accept, cidr: 10.1.2.128/25}
- {action: accept, cidr: 10.1.2.130/31, peer_cidr: 192.168.7.7/32}
- {action: reject, cidr: 10.200.0.0/14}
- {action: accept, cidr: "fd00::/8"}
`))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := flowrules.Compile(rules, flowrules.Reject)
	if err != nil {
		t.Fatal(err)
	}
	v4 := v4Table(tbl.Addrs)
	lookup := func(a uint32) datapathFilterV4Entry {
		e := v4[a>>16]
		if e.Next != 0 {
			e = v4[e.Next+(a>>8)&0xff]
		}
		if e.Next != 0 {
			e = v4[e.Next+a&0xff]
		}
		return e
	}
	rng := rand.New(rand.NewPCG(4, 4))
	near := []uint32{0x0a000000, 0x0a010000, 0x0a010200, 0x0a010280, 0x0a010282, 0x0ac80000, 0xc0a80707, 0xc0a00000, 0xc0af0000}
	for i := range 200000 {
		a := rng.Uint32()
		if i%2 == 0 { // most addresses near the prefixes' edges
			a = near[rng.IntN(len(near))] + uint32(rng.IntN(512)) - 256
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], a)
		cidr, peer := tbl.AddrBits(netip.AddrFrom4(b))
		if e := lookup(a); e.Cidr != cidr || e.Peer != peer {
			t.Fatalf("%v: multibit trie %#x/%#x, LPM %#x/%#x", netip.AddrFrom4(b), e.Cidr, e.Peer, cidr, peer)
		}
	}
}

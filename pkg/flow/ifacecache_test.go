package flow_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flowlens/flowlens/pkg/flow"
)

// The cache gives what encoding gives, through collisions (1000 interfaces
// over 256 slots) and interfaces renamed or moved under the same index;
// a node's few interfaces are encoded about once each.
func TestInterfaceCacheGivesTheEncoding(t *testing.T) {
	encode := func(b []byte, it *flow.Interface) []byte {
		return fmt.Appendf(b, "%s/%d/%s/%d/%v", it.Name, it.Ifindex, it.Netns, it.NetnsID, it.Direction)
	}
	encodings := 0
	c := flow.NewInterfaceCache(func(b []byte, it *flow.Interface) []byte {
		encodings++
		return encode(b, it)
	})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 100_000 {
		n := rng.IntN(1000)
		it := flow.Interface{Name: fmt.Sprintf("veth%d", n), Ifindex: uint32(n % 300), Netns: fmt.Sprint("ns", n%7),
			NetnsID: uint64(n % 7), Direction: flow.Direction(1 + n%3)}
		switch rng.IntN(20) {
		case 0:
			it.Name += "-renamed"
		case 1:
			it.Netns = "other"
		}
		if got, want := c.Get(&it), encode(nil, &it); !bytes.Equal(got, want) {
			t.Fatalf("get %d: %q, want %q", i, got, want)
		}
	}
	// A node's few interfaces: encoded about once each.
	encodings = 0
	for range 10_000 {
		n := rng.IntN(50)
		it := flow.Interface{Name: fmt.Sprintf("veth%d", n), Ifindex: uint32(n), Netns: "host", NetnsID: 1, Direction: flow.DirIngress}
		c.Get(&it)
	}
	if encodings > 1000 {
		t.Errorf("%d encodings for 10k gets of 50 interfaces: the cache keeps little", encodings)
	}
}

package otlp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The interface cache changes no byte of a request: flows over 1000
// interfaces (four per slot of the cache, so slots are taken over all the
// time, two interfaces of one flow sometimes in the same slot), some
// renamed or moved to another namespace under the same index, encode as
// they do with the cache emptied before each flow.
func TestInterfaceCacheChangesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := make([]flow.Interface, 1000)
	for i := range pool {
		pool[i] = flow.Interface{Name: fmt.Sprintf("veth%04x", i), Ifindex: uint32(2 + i%300), Netns: fmt.Sprintf("cni-%d", i%7),
			NetnsID: 4026531840 + uint64(i%7), Direction: flow.Direction(1 + i%3)}
	}
	recs := exportertest.Records(3000)
	for i := range recs {
		its := make([]flow.Interface, 1+rng.IntN(4))
		for j := range its {
			its[j] = pool[rng.IntN(len(pool))]
			switch rng.IntN(20) {
			case 0:
				its[j].Name += "-renamed"
			case 1:
				its[j].Netns = "other"
			}
		}
		recs[i].Interfaces = its
	}
	warm, cold := newEncoder("node-1", "v1"), newEncoder("node-1", "v1")
	for i := range recs {
		cold.ifaces = newIfaceCache()
		if got, want := encodeOne(warm, &recs[i]), encodeOne(cold, &recs[i]); !bytes.Equal(got, want) {
			t.Fatalf("flow %d (interfaces %+v): cached encoding differs from a fresh one", i, recs[i].Interfaces)
		}
	}
}

func encodeOne(e *encoder, r *flow.Record) []byte {
	e.begin(1)
	e.appendFlow(r)
	return bytes.Clone(e.finish().req)
}

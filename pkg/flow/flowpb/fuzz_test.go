package flowpb_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// FuzzDecodeBatch feeds DecodeBatch (the collector's decoder of untrusted
// FlowBatch bytes: count, bounds, unmarshal, validate) any bytes. It must
// not panic; what it returns must be consistent: on success every flow
// validates and every flow of the message is either returned or refused
// for a bound, and the flows are proto.Unmarshal's. The seeds (agent
// batches, bounds broken, truncations) run as a normal test.
func FuzzDecodeBatch(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		f.Add(flowpb.AppendBatch(nil, randRecords(rng, 1+rng.IntN(4)), "node-1", []byte{10, 0, 0, 1}))
	}
	g := goodFlow()
	good, _ := proto.Marshal(&flowv1.FlowBatch{Flows: []*flowv1.Flow{g, g}})
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add(emptyFlows(20))
	long := goodFlow()
	long.Interfaces = append(long.Interfaces, &flowv1.Interface{Name: "0123456789abcdef"})
	b, _ := proto.Marshal(&flowv1.FlowBatch{Flows: []*flowv1.Flow{g, long, g}})
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		const max = 16
		flows, refused, err := flowpb.DecodeBatch(b, max)
		n, cerr := flowpb.CountFlows(b)
		if err != nil {
			var tm *flowpb.TooManyFlowsError
			if errors.As(err, &tm) && (cerr != nil || tm.N != n || n <= max) {
				t.Fatalf("TooManyFlowsError %v, CountFlows %d, %v", err, n, cerr)
			}
			return
		}
		if cerr != nil || len(flows)+len(refused) != n {
			t.Fatalf("%d flows + %d refused, CountFlows %d, %v", len(flows), len(refused), n, cerr)
		}
		for _, fl := range flows {
			if err := flowpb.Validate(fl); err != nil {
				t.Fatalf("returned an invalid flow: %v", err)
			}
		}
		if len(refused) == 0 {
			var want flowv1.FlowBatch
			if err := proto.Unmarshal(b, &want); err != nil {
				t.Fatalf("DecodeBatch accepted what proto.Unmarshal refuses: %v", err)
			}
			for i := range flows {
				if !proto.Equal(flows[i], want.Flows[i]) {
					t.Fatalf("flows[%d] differs from proto.Unmarshal's", i)
				}
			}
		}
	})
}

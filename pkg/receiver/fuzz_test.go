package receiver_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// FuzzDecodeRecord feeds the Kafka consumer's record decoder any value
// under each content type (kind 0: FlowBatch, 1: Flow, else an unknown
// header). It must not panic; flows it returns validate, and a FlowBatch's
// flows are all returned or refused. The seeds run as a normal test.
func FuzzDecodeRecord(f *testing.F) {
	batch, _ := proto.Marshal(flows(3, 80))
	one, _ := proto.Marshal(flows(1, 443).Flows[0])
	f.Add(uint8(0), batch)
	f.Add(uint8(1), one)
	f.Add(uint8(0), emptyFlows(40))
	f.Add(uint8(1), batch[:len(batch)/2])
	f.Add(uint8(2), one)
	f.Add(uint8(0), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	cts := []string{flowkafka.ContentTypeBatch, flowkafka.ContentTypeFlow, "text/plain"}
	f.Fuzz(func(t *testing.T, kind uint8, value []byte) {
		ct := cts[int(kind)%len(cts)]
		const max = 32
		got, refused, err := receiver.DecodeRecord(ct, value, max)
		if err != nil {
			if got != nil || refused != nil {
				t.Fatalf("an error with %d flows and %d refused", len(got), len(refused))
			}
			return
		}
		for _, fl := range got {
			if err := flowpb.Validate(fl); err != nil {
				t.Fatalf("an invalid flow: %v", err)
			}
		}
		switch ct {
		case flowkafka.ContentTypeBatch:
			if n, _ := flowpb.CountFlows(value); n != len(got)+len(refused) || n > max {
				t.Fatalf("%d flows, %d refused, %d in the record", len(got), len(refused), n)
			}
		case flowkafka.ContentTypeFlow:
			if len(got)+len(refused) != 1 {
				t.Fatalf("one Flow gave %d flows and %d refused", len(got), len(refused))
			}
			if len(got) == 1 {
				var want flowv1.Flow
				if err := proto.Unmarshal(value, &want); err != nil || !proto.Equal(&want, got[0]) {
					t.Fatalf("differs from proto.Unmarshal (%v)", err)
				}
			}
		default:
			t.Fatalf("content type %q accepted", ct)
		}
	})
}

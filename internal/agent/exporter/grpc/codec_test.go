package grpc

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The codec sends an encodedBatch's bytes as they are, in a copy (gRPC uses
// them after Send returns, the exporter reuses its buffer), and everything
// else as protobuf.
func TestPassthroughCodec(t *testing.T) {
	c := newPassthroughCodec()
	if c.Name() != "proto" {
		t.Fatalf("name %q: the collector would not find a codec for it", c.Name())
	}
	wire := bytes.Repeat([]byte{0x0a, 0x02, 0x08, 0x01}, 1000) // over gRPC's pooling threshold
	out, err := c.Marshal(&encodedBatch{wire: wire})
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(wire)
	clear(wire) // the exporter encoding its next batch
	if got := out.Materialize(); !bytes.Equal(got, want) {
		t.Fatalf("sent bytes changed with the exporter's buffer")
	}
	out.Free()

	sum := &flowv1.ExportSummary{Batches: 3, Flows: 7000}
	out, err = c.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	if pb, _ := proto.Marshal(sum); !bytes.Equal(out.Materialize(), pb) {
		t.Fatal("ExportSummary not marshalled as protobuf")
	}
	var back flowv1.ExportSummary
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(out.Materialize())}, &back); err != nil || !proto.Equal(&back, sum) {
		t.Fatalf("ExportSummary decoded as %v, %v", &back, err)
	}
	out.Free()
}

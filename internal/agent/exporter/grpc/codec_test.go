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
	c := newPassthroughCodec(newLender(4))
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

	// Small lent messages are copied too: gRPC frees a buffer under its
	// pooling threshold without telling the pool.
	small := []byte{0x0a, 0x02, 0x08, 0x01}
	out, _ = c.Marshal(&encodedBatch{wire: small, lend: true})
	if &out.Materialize()[0] == &small[0] {
		t.Fatal("a message under gRPC's pooling threshold was lent, not copied")
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

// A lent message goes to gRPC without a copy, and its buffer comes back
// into use only when both the exporter (release) and gRPC (Free, of every
// reference: a message sent again is lent again) are done with it, in
// either order.
func TestLenderReusesOnlyWhatBothReleased(t *testing.T) {
	l := newLender(4)
	c := newPassthroughCodec(l)
	wire := bytes.Repeat([]byte{0x0a, 0x02, 0x08, 0x01}, 1000)
	out, err := c.Marshal(&encodedBatch{wire: wire, lend: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || &out[0].ReadOnlyData()[0] != &wire[0] {
		t.Fatal("a lent message was copied")
	}
	again, _ := c.Marshal(&encodedBatch{wire: wire, lend: true}) // resent on a new stream
	again.Ref()                                                  // gRPC's retry buffer
	again.Free()

	l.release(wire) // acknowledged: gRPC still holds two references
	if b := l.take(); b != nil {
		t.Fatal("a buffer gRPC still holds was reused")
	}
	out.Free()
	if b := l.take(); b != nil {
		t.Fatal("a buffer gRPC still holds (its retry reference) was reused")
	}
	again.Free()
	if b := l.take(); cap(b) == 0 || &b[:1][0] != &wire[0] {
		t.Fatal("the buffer did not come back once both were done with it")
	}

	// The other order: gRPC frees first, the exporter releases later.
	out, _ = c.Marshal(&encodedBatch{wire: wire, lend: true})
	out.Free()
	if b := l.take(); b != nil {
		t.Fatal("a buffer the exporter still keeps was reused")
	}
	l.release(wire)
	if b := l.take(); cap(b) == 0 || &b[:1][0] != &wire[0] {
		t.Fatal("the buffer did not come back")
	}
}

// Buffers gRPC never frees cannot grow the lender: past maxHeld lent at
// once, messages go as copies again.
func TestLenderBounded(t *testing.T) {
	l := newLender(1)
	c := newPassthroughCodec(l)
	var outs []mem.BufferSlice
	for range l.maxHeld() {
		wire := bytes.Repeat([]byte{0x0a, 0x02, 0x08, 0x01}, 1000)
		out, _ := c.Marshal(&encodedBatch{wire: wire, lend: true})
		if &out[0].ReadOnlyData()[0] != &wire[0] {
			t.Fatal("copied before the bound")
		}
		outs = append(outs, out)
	}
	wire := bytes.Repeat([]byte{0x0a, 0x02, 0x08, 0x01}, 1000)
	out, _ := c.Marshal(&encodedBatch{wire: wire, lend: true})
	if &out.Materialize()[0] == &wire[0] {
		t.Fatalf("lent past the bound of %d", l.maxHeld())
	}
	for _, o := range outs {
		o.Free()
	}
	if len(l.held) != 0 {
		t.Fatalf("%d buffers still held after gRPC freed them all", len(l.held))
	}
}

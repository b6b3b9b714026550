package grpc

import (
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// encodedBatch is a FlowBatch already in wire form (flowpb.AppendFlow
// elements), sent as is by passthroughCodec.
type encodedBatch struct{ wire []byte }

// passthroughCodec is the export stream's codec (set with ForceCodecV2 on
// that stream only, never registered globally): it sends an *encodedBatch's
// bytes without re-marshalling, and leaves everything else (the
// ExportSummary reply) to the standard proto codec.
//
// It copies the bytes into a buffer from gRPC's pool instead of handing
// over the exporter's own: gRPC writes a message asynchronously, and keeps
// it for a transparent retry, after Send has returned, and the exporter
// reuses its buffer for the next batch. gRPC returns the copy to the pool.
//
// Its name is "proto": the bytes are protobuf, the content type is the
// standard application/grpc+proto, and the collector (any gRPC server)
// decodes them with its proto codec.
type passthroughCodec struct{ proto encoding.CodecV2 }

func newPassthroughCodec() passthroughCodec {
	return passthroughCodec{proto: encoding.GetCodecV2(protocodec.Name)}
}

func (c passthroughCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*encodedBatch); ok {
		return mem.BufferSlice{mem.Copy(m.wire, mem.DefaultBufferPool())}, nil
	}
	return c.proto.Marshal(v)
}

func (c passthroughCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return c.proto.Unmarshal(data, v)
}

func (passthroughCodec) Name() string { return protocodec.Name }

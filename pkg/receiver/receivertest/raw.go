package receivertest

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// ExportRaw opens an Export stream on conn, sends payload as one message
// exactly as given (bytes that need not be a valid FlowBatch: hostile,
// truncated or oversized input) and returns the stream's status.
func ExportRaw(ctx context.Context, conn *grpc.ClientConn, payload []byte) error {
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Export", ClientStreams: true},
		flowv1.FlowCollector_Export_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	if err := st.SendMsg(&payload); err != nil && err != io.EOF {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	return st.RecvMsg(&flowv1.ExportSummary{})
}

// rawCodec sends a *[]byte as it is and decodes replies as protobuf.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(*[]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
	}
	return encoding.GetCodecV2("proto").Marshal(v)
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

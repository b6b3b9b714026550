package history

import (
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/flowquery"
)

// Register serves s on r (a receiver.Server) as FlowHistory, with its own
// handler for GetFlows: the request's encoded size and its filter's terms
// are checked on the wire (RequestCheck) before anything is decoded, so
// that a request of millions of ports costs a scan of its bytes, not
// millions of allocations.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	desc := flowv1.FlowHistory_ServiceDesc
	desc.Streams = slices.Clone(desc.Streams)
	desc.Streams[0].Handler = getFlowsHandler
	r.RegisterService(&desc, s)
}

func getFlowsHandler(srv any, stream grpc.ServerStream) error {
	s := srv.(*Service)
	in := &wireRequest{s: s}
	if err := stream.RecvMsg(in); err != nil {
		return err
	}
	if in.err != nil {
		return in.err
	}
	return s.GetFlows(&in.req, &grpc.GenericServerStream[flowv1.GetFlowsRequest, flowv1.GetFlowsResponse]{ServerStream: stream})
}

// wireRequest receives a GetFlowsRequest through the receiver's codec
// (pkg/receiver calls UnmarshalGRPC for it): checked, then decoded. Its
// errors are gRPC statuses, returned by the handler (a codec's error would
// reach the client as Internal).
type wireRequest struct {
	s   *Service
	req flowv1.GetFlowsRequest
	err error
}

// UnmarshalGRPC implements pkg/receiver's raw decoding hook.
func (w *wireRequest) UnmarshalGRPC(data mem.BufferSlice) error {
	if n := data.Len(); n > w.s.opts.MaxRequestBytes {
		w.s.Stats.refuse(RefusedRequestBytes)
		w.err = status.Errorf(codes.ResourceExhausted, "GetFlows: request of %d bytes, max %d (--history-max-request-bytes)", n, w.s.opts.MaxRequestBytes)
		return nil
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	w.err = w.s.decodeRequest(buf.ReadOnlyData(), &w.req)
	return nil
}

// decodeRequest checks b's terms (RequestTerms) and decodes it into req.
func (s *Service) decodeRequest(b []byte, req *flowv1.GetFlowsRequest) error {
	terms, err := RequestTerms(b)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "GetFlows: malformed request: %v", err)
	}
	if err := s.checkTerms(terms); err != nil {
		return err
	}
	if err := proto.Unmarshal(b, req); err != nil {
		return status.Errorf(codes.InvalidArgument, "GetFlows: malformed request: %v", err)
	}
	return nil
}

func (s *Service) checkTerms(terms int) error {
	if terms > s.opts.MaxFilterTerms {
		s.Stats.refuse(RefusedFilterTerms)
		return status.Errorf(codes.InvalidArgument, "GetFlows: filter of %d terms, max %d (--history-max-filter-terms): each filter and each value in one counts one",
			terms, s.opts.MaxFilterTerms)
	}
	return nil
}

// countTerms counts a decoded request's terms (flowquery.Terms), as
// RequestTerms counts them on the wire.
func countTerms(req *flowv1.GetFlowsRequest) int { return flowquery.Terms(req.Filters) }

// Field numbers of GetFlowsRequest.filters and of FlowFilter's repeated
// fields (api/flow/v1/history.proto): strings, and numbers (packed or
// not).
const wireFilters = 1

var (
	wireStringFields = []protowire.Number{2, 3, 4, 5, 6, 7, 8, 14, 19}
	wireNumberFields = []protowire.Number{9, 10, 11, 12, 15, 17}
)

// RequestTerms counts the terms of an encoded GetFlowsRequest without
// decoding it or allocating, as flowquery.Terms counts a decoded one: one
// per FlowFilter and one per value of a FlowFilter's repeated fields (a
// packed list counts its varints). It never counts fewer than the decoded
// request holds (a field of the wrong wire type, which the decoder keeps
// as unknown, counts too). An
// error says where the encoding is broken.
func RequestTerms(b []byte) (int, error) {
	n := 0
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != wireFilters || typ != protowire.BytesType {
			return nil
		}
		n++
		return walk(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			switch {
			case slices.Contains(wireStringFields, num):
				n++
			case slices.Contains(wireNumberFields, num):
				if typ != protowire.BytesType {
					n++
					break
				}
				for _, c := range v { // packed: one varint ends at each byte below 0x80
					if c < 0x80 {
						n++
					}
				}
			}
			return nil
		})
	})
	return n, err
}

// walk calls fn for every field of the message encoded in b: its number,
// type and, for length-delimited fields, its bytes.
func walk(b []byte, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

package otlp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/flowlens/flowlens/internal/agent/exporter/otlp"
)

// partialServer accepts each request but the last `reject` records of
// it, answering with a partial success, as a backend that drops records it
// cannot store does (the Collector's receiver itself never answers one).
// Requests are decoded and answers encoded by the Collector's pdata.
//
// throttle makes it refuse the first requests instead with gRPC
// RESOURCE_EXHAUSTED, with a RetryInfo detail (retry later) when retryInfo
// is set, or HTTP 429 with Retry-After.
type partialServer struct {
	plogotlp.UnimplementedGRPCServer
	reject    int64
	throttle  int
	retryInfo bool
	mu        sync.Mutex
	got       int
}

func (s *partialServer) Export(_ context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.throttle > 0 {
		s.throttle--
		st := status.New(codes.ResourceExhausted, "over quota")
		if s.retryInfo {
			st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(20 * time.Millisecond)})
		}
		return plogotlp.NewExportResponse(), st.Err()
	}
	s.got += req.Logs().LogRecordCount()
	resp := plogotlp.NewExportResponse()
	resp.PartialSuccess().SetRejectedLogRecords(s.reject)
	resp.PartialSuccess().SetErrorMessage("records too old")
	return resp, nil
}

func (s *partialServer) start(t *testing.T, protocol string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if protocol == "grpc" {
		srv := grpc.NewServer()
		plogotlp.RegisterGRPCServer(srv, s)
		go srv.Serve(l)
		t.Cleanup(srv.Stop)
		return l.Addr().String()
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := plogotlp.NewExportRequest()
		if r.URL.Path != "/v1/logs" || req.UnmarshalProto(body) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		resp, err := s.Export(r.Context(), req)
		if err != nil {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "over quota", http.StatusTooManyRequests)
			return
		}
		b, _ := resp.MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// A partial success is not an error, but its rejected records are counted
// as lost (export_rejected_flows_total), the rest as accepted.
func TestPartialSuccessCounted(t *testing.T) {
	for _, protocol := range []string{"grpc", "http"} {
		t.Run(protocol, func(t *testing.T) {
			s := &partialServer{reject: 3}
			e := newExporter(t, otlp.Config{Endpoint: s.start(t, protocol), Protocol: protocol, BatchFlows: 4})
			sent := records() // 10: requests of 4, 4 and 2 records
			if err := e.Export(context.Background(), sent); err != nil {
				t.Fatal(err)
			}
			if s.got != len(sent) { // Export returned: the server is done
				t.Errorf("server got %d records, want %d", s.got, len(sent))
			}
			// 3 rejected of each request, 2 (all) of the last.
			if r, a := e.Stats.RejectedFlows.Load(), e.Stats.AckedFlows.Load(); r != 8 || a != 2 {
				t.Errorf("rejected %d, accepted %d; want 8 and 2", r, a)
			}
		})
	}
}

// Throttling is retried only when the receiver says it will recover: gRPC
// RESOURCE_EXHAUSTED with RetryInfo, HTTP 429; RESOURCE_EXHAUSTED without
// RetryInfo is a refusal, counted.
func TestThrottling(t *testing.T) {
	for _, tc := range []struct {
		protocol  string
		retryInfo bool
		retried   bool
	}{{"grpc", true, true}, {"grpc", false, false}, {"http", false, true}} {
		t.Run(fmt.Sprintf("%s retry-info=%v", tc.protocol, tc.retryInfo), func(t *testing.T) {
			s := &partialServer{throttle: 2, retryInfo: tc.retryInfo}
			e := newExporter(t, otlp.Config{Endpoint: s.start(t, tc.protocol), Protocol: tc.protocol, BatchFlows: 100})
			sent := records()
			if err := e.Export(context.Background(), sent); err != nil {
				t.Fatal(err)
			}
			retries, rejected, accepted := e.Stats.Retries.Load(), e.Stats.RejectedFlows.Load(), e.Stats.AckedFlows.Load()
			if tc.retried && (retries != 2 || rejected != 0 || accepted != uint64(len(sent))) ||
				!tc.retried && (retries != 0 || rejected != uint64(len(sent)) || accepted != 0) {
				t.Errorf("retries %d, rejected %d, accepted %d", retries, rejected, accepted)
			}
		})
	}
}

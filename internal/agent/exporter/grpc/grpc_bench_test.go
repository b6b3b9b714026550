package grpc_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	grpcgo "google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
	flowgrpc "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
	"github.com/flowlens/flowlens/pkg/receiver"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// quiet keeps log lines out of the benchmark output (benchstat parses it).
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Benchmarks of the gRPC export path. Run with `make bench` (no Test
// function here: `make test` does not run them).

func benchRecords(n int) []flow.Record {
	out := make([]flow.Record, n)
	start := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	for i := range out {
		out[i] = flow.Record{
			SrcAddr: netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), DstAddr: netip.MustParseAddr("10.96.0.10"),
			SrcPort: uint16(30000 + i%30000), DstPort: 8080, Proto: 6,
			Bytes: 123456, Packets: 87, TCPFlags: 0x1b | flow.TCPFlagSynAck, EthType: 0x0800,
			SrcMAC: [6]byte{0x02, 0x42, 0xac, 0x11, 0, 2}, DstMAC: [6]byte{0x02, 0x42, 0xac, 0x11, 0, 3},
			StartTime: start, EndTime: start.Add(4 * time.Second),
			Interfaces: []flow.Interface{
				{Name: "veth1a2b3c", Ifindex: 7, Netns: "host", NetnsID: 4026531840, Direction: flow.DirIngress},
				{Name: "eth0", Ifindex: 2, Netns: "host", NetnsID: 4026531840, Direction: flow.DirEgress},
			},
			Sampling:          1,
			RTTFields:         flow.RTTFields{RTT: 150 * time.Microsecond, RTTMax: time.Millisecond},
			RetransmitsFields: flow.RetransmitsFields{Retransmits: 1},
		}
	}
	return out
}

// BenchmarkEncode is Record → protobuf wire bytes for a batch of 1000
// flows: path=proto through flowv1.Flow messages (flowpb.Encoder, reused
// messages) and proto.Marshal, as the exporter once did; path=direct with
// flowpb.AppendBatch; path=appender with a flowpb.Appender, whose interface
// cache is warm after the first op, as the exporter does now. Same bytes
// every way.
func BenchmarkEncode(b *testing.B) {
	const n = 1000
	recs := benchRecords(n)
	id := flowpb.Identity{NodeName: "node-1", AgentIP: netip.MustParseAddr("192.0.2.1")}
	report := func(b *testing.B, buf []byte) {
		b.SetBytes(int64(len(buf)))
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/flow")
		b.ReportMetric(float64(len(buf))/n, "wire-bytes/flow")
	}
	b.Run("path=proto", func(b *testing.B) {
		enc := flowpb.NewEncoder(id)
		var msg flowv1.FlowBatch
		buf := make([]byte, 0, 1<<20)
		opts := proto.MarshalOptions{}
		b.ReportAllocs()
		for b.Loop() {
			msg.Flows = enc.Encode(recs)
			var err error
			buf, err = opts.MarshalAppend(buf[:0], &msg)
			if err != nil {
				b.Fatal(err)
			}
		}
		report(b, buf)
	})
	b.Run("path=direct", func(b *testing.B) {
		ip := flowpb.AddrBytes(id.AgentIP)
		buf := make([]byte, 0, 1<<20)
		b.ReportAllocs()
		for b.Loop() {
			buf = flowpb.AppendBatch(buf[:0], recs, id.NodeName, ip)
		}
		report(b, buf)
	})
	b.Run("path=appender", func(b *testing.B) {
		a := flowpb.NewAppender(id.NodeName, flowpb.AddrBytes(id.AgentIP))
		buf := make([]byte, 0, 1<<20)
		b.ReportAllocs()
		for b.Loop() {
			buf = buf[:0]
			for i := range recs {
				buf = a.Append(buf, &recs[i])
			}
		}
		report(b, buf)
	})
}

// BenchmarkExport sends 10k flows (batches of 1000, the agent's default
// --grpc-batch-size) to a pkg/receiver server on loopback and waits until
// the collector has received them all. Allocations are both sides' (one
// process): the collector's decoding allocates per flow by design (it may
// keep the messages).
func BenchmarkExport(b *testing.B) {
	const n, batch = 10000, 1000
	var received atomic.Int64
	srv, err := receiver.New(func(ctx context.Context, bt *receiver.Batch) error {
		received.Add(int64(len(bt.Flows)))
		return nil
	}, receiver.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(lis)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	exp, err := flowgrpc.New(flowgrpc.Config{Target: lis.Addr().String(), NodeName: "node-1", Logger: quiet, MaxUnackedBatches: agentUnacked})
	if err != nil {
		b.Fatal(err)
	}
	defer exp.Close()
	benchSend(b, exp, n, batch, func() (int64, int64) { return received.Load(), 0 }, "flows")
}

// BenchmarkExportSink is BenchmarkExport against a server that counts the
// messages without decoding them, so that the allocations are the
// exporter's and gRPC's transport's alone, not the collector's decoding.
func BenchmarkExportSink(b *testing.B) {
	const n, batch = 10000, 1000
	received, addr := sinkServer(b)
	exp, err := flowgrpc.New(flowgrpc.Config{Target: addr, NodeName: "node-1", Logger: quiet, MaxUnackedBatches: agentUnacked})
	if err != nil {
		b.Fatal(err)
	}
	defer exp.Close()
	benchSend(b, exp, n, batch, func() (int64, int64) {
		return int64(received.Load()), int64(exp.Stats.Messages.Load())
	}, "messages")
}

// benchSend runs the export benchmarks' loop: each op exports n records in
// batches and waits until the server has them. progress returns what the
// server received and, when it is not simply n more per op, what it must
// reach (messages: the exporter's own count).
func benchSend(b *testing.B, exp *flowgrpc.Exporter, n, batch int, progress func() (got, want int64), unit string) {
	recs := benchRecords(n)
	ctx := context.Background()
	send := func() {
		got0, _ := progress()
		for i := 0; i < n; i += batch {
			if err := exp.Export(ctx, recs[i:i+batch]); err != nil {
				b.Fatal(err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, want := progress()
			if want == 0 {
				want = got0 + int64(n)
			}
			if got >= want {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("server received %d of %d %s", got, want, unit)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	send() // connect and warm up
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		send()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/flow")
}

// sinkMsg is any message the sink receives: only the seq of its identity
// (which the agent writes first) is read.
type sinkMsg struct{ seq uint64 }

// sinkCodec drops what it receives and marshals the reply as protobuf.
// sinkServer serves FlowCollector/Export on loopback, counting the
// messages it receives without decoding them, until b ends.
func sinkServer(b testing.TB, opts ...grpcgo.ServerOption) (received *atomic.Uint64, addr string) {
	received = new(atomic.Uint64)
	srv := newSink(received, opts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	return received, lis.Addr().String()
}

// newSink is sinkServer's gRPC server, counting into received; on
// ExportAcked it acknowledges every message (as a collector does, without
// applying anything).
func newSink(received *atomic.Uint64, opts ...grpcgo.ServerOption) *grpcgo.Server {
	return newSinkOf(received, true, opts...)
}

// newSinkOf is newSink, without ExportAcked unless acked (a collector
// built before it).
func newSinkOf(received *atomic.Uint64, acked bool, opts ...grpcgo.ServerOption) *grpcgo.Server {
	srv := grpcgo.NewServer(append(opts, grpcgo.ForceServerCodecV2(sinkCodec{}))...)
	desc := grpcgo.ServiceDesc{
		ServiceName: "flowlens.flow.v1.FlowCollector",
		HandlerType: (*any)(nil),
		Streams: []grpcgo.StreamDesc{{StreamName: "Export", ClientStreams: true,
			Handler: func(_ any, s grpcgo.ServerStream) error {
				for {
					if err := s.RecvMsg(&sinkMsg{}); err == io.EOF {
						return s.SendMsg(&flowv1.ExportSummary{})
					} else if err != nil {
						return err
					}
					received.Add(1)
				}
			}}, {StreamName: "ExportAcked", ClientStreams: true, ServerStreams: true,
			Handler: func(_ any, s grpcgo.ServerStream) error {
				// As pkg/receiver: the latest seq, from a goroutine of
				// its own (one ack may cover several messages).
				var latest atomic.Uint64
				wake, quit, done := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
				go func() {
					defer close(done)
					var ack flowv1.ExportAck
					for {
						select {
						case <-wake:
						case <-quit:
							return
						}
						if seq := latest.Load(); seq != ack.Seq {
							ack.Seq = seq
							if s.SendMsg(&ack) != nil {
								return
							}
						}
					}
				}()
				defer func() { close(quit); <-done }()
				var m sinkMsg
				for {
					if err := s.RecvMsg(&m); err == io.EOF {
						return nil
					} else if err != nil {
						return err
					}
					received.Add(1)
					latest.Store(m.seq)
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			}}},
	}
	if !acked {
		desc.Streams = desc.Streams[:1]
	}
	srv.RegisterService(&desc, struct{}{})
	return srv
}

type sinkCodec struct{}

func (sinkCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}
func (sinkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*sinkMsg)
	if !ok || len(data) == 0 {
		return nil
	}
	// The identity first: agent_instance (2), then seq (3, fixed64).
	b := data[0].ReadOnlyData()
	if len(b) < 512 && data.Len() > len(b) {
		b = data.Materialize()[:min(data.Len(), 512)]
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == 3 && typ == protowire.Fixed64Type {
			m.seq, _ = protowire.ConsumeFixed64(b)
			return nil
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil
		}
		b = b[n:]
	}
	return nil
}
func (sinkCodec) Name() string { return "proto" }

// BenchmarkEviction is the gRPC exporter's cost per flow at 100k flows per
// eviction (exportertest.Run), to a server on loopback that counts the
// messages without decoding them (as BenchmarkExportSink); each op waits
// until the server has every message. The server runs in the process: its
// CPU and allocations are in the per-flow figures too.
func BenchmarkEviction(b *testing.B) {
	received, addr := sinkServer(b)
	exp, err := flowgrpc.New(flowgrpc.Config{Target: addr, NodeName: "node-1", Logger: quiet, MaxUnackedBatches: agentUnacked})
	if err != nil {
		b.Fatal(err)
	}
	defer exp.Close()
	exportertest.Run(b, exp, func() { awaitMessages(b, exp, received.Load, 20*time.Microsecond) })
}

// agentUnacked is what the agent gives the exporter by default: the bound
// of --export-buffer.
var agentUnacked = (&config.Config{}).ExportQueueBatches()

// BenchmarkEvictionTLS is BenchmarkEviction over TLS with a bearer token
// file, as the operator's secure default runs the agent (issue #27): the
// difference is what encryption costs per flow, both ends in the process
// (the token is read and sent once per stream, not per batch).
func BenchmarkEvictionTLS(b *testing.B) {
	pki := receivertest.NewPKI(b)
	tlsCfg, err := receiver.ServerTLSClientCertOptional(pki.ServerCert, pki.ServerKey, "")
	if err != nil {
		b.Fatal(err)
	}
	received, addr := sinkServer(b, grpcgo.Creds(credentials.NewTLS(tlsCfg)))
	token := filepath.Join(b.TempDir(), "token")
	if err := os.WriteFile(token, []byte(strings.Repeat("t", 900)), 0o600); err != nil {
		b.Fatal(err)
	}
	exp, err := flowgrpc.New(flowgrpc.Config{Target: addr, NodeName: "node-1", Logger: quiet,
		TLS: true, TLSCA: pki.CA, TokenFile: token, MaxUnackedBatches: agentUnacked})
	if err != nil {
		b.Fatal(err)
	}
	defer exp.Close()
	exportertest.Run(b, exp, func() { awaitMessages(b, exp, received.Load, 20*time.Microsecond) })
}

// awaitMessages returns once the server has received (its count, read
// every poll) every message exp sent, failing tb after 30 s.
func awaitMessages(tb testing.TB, exp *flowgrpc.Exporter, received func() uint64, poll time.Duration) {
	deadline := time.Now().Add(30 * time.Second)
	for received() < exp.Stats.Messages.Load() {
		if time.Now().After(deadline) {
			tb.Fatalf("server received %d of %d messages", received(), exp.Stats.Messages.Load())
		}
		time.Sleep(poll)
	}
}

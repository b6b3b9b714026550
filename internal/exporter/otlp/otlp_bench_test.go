package otlp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	grpcgo "google.golang.org/grpc"

	"github.com/flowlens/flowlens/pkg/flow"
)

// Benchmarks of the OTLP export path (`make bench`). The correctness
// tests, against the OpenTelemetry Collector's receiver, are in test/otlp;
// the receiver here only discards what it gets, in a child process (this
// test binary again), so that the CPU and allocations measured are the
// agent's side alone: encode + send per flow.

// discardEnv makes the test binary a discarding receiver (TestMain).
const discardEnv = "FLOWLENS_OTLP_BENCH_DISCARD"

func TestMain(m *testing.M) {
	if protocol := os.Getenv(discardEnv); protocol != "" {
		serveDiscard(protocol)
		return
	}
	os.Exit(m.Run())
}

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
			Sampling: 1, RTT: 150 * time.Microsecond, RTTMax: time.Millisecond, Retransmits: 1,
		}
	}
	return out
}

// TestEncodeAllocatesNothing: once its buffer has grown, encoding a flow
// allocates nothing (the CPU figures are in the benchmarks).
func TestEncodeAllocatesNothing(t *testing.T) {
	recs := benchRecords(1000)
	recs[0].DNSName, recs[0].DNSID, recs[0].DNSLatency = "example.com", 1, time.Millisecond
	recs[1].TLSVersion, recs[1].TLSCipherSuite, recs[1].TLSGroup = 0x0304, 0xabcd, 0x001d
	recs[2].XlatDstAddr, recs[2].XlatDstPort = netip.MustParseAddr("10.0.0.9"), 80
	e := newEncoder("node-1", "v1")
	encode := func() {
		e.begin()
		for i := range recs {
			e.appendFlow(&recs[i], 1)
		}
		e.finish()
	}
	encode()
	if n := testing.AllocsPerRun(10, encode); n != 0 {
		t.Errorf("%v allocations per 1000 flows, want 0", n)
	}
}

// BenchmarkEncode is Record → ExportLogsServiceRequest bytes, 1000 flows
// per request.
func BenchmarkEncode(b *testing.B) {
	const n = 1000
	recs := benchRecords(n)
	e := newEncoder("node-1", "v1")
	var size int
	b.ReportAllocs()
	for b.Loop() {
		e.begin()
		for i := range recs {
			e.appendFlow(&recs[i], 1)
		}
		size = len(e.finish())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/flow")
	b.ReportMetric(float64(size)/n, "wire-bytes/flow")
}

// BenchmarkExport is Export of one eviction of 100k flows (100 requests of
// 1000) to a receiver on loopback that discards them: encode + send + wait
// for the answer, over gRPC and HTTP, with and without gzip. ns/flow is
// the wall time; cpu-ns/flow the agent's CPU time (this process: the
// receiver is another), which is what the ≤ 1 µs target is about.
func BenchmarkExport(b *testing.B) {
	const n = 100_000
	recs := benchRecords(n)
	for _, tc := range []struct{ protocol, compression string }{
		{"grpc", "none"}, {"grpc", "gzip"}, {"http", "none"}, {"http", "gzip"},
	} {
		b.Run("protocol="+tc.protocol+"/compression="+tc.compression, func(b *testing.B) {
			addr := discardReceiver(b, tc.protocol)
			e, err := New(Config{Endpoint: addr, Protocol: tc.protocol, Compression: tc.compression,
				NodeName: "node-1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			if err := e.Export(context.Background(), recs); err != nil { // connect, grow the buffers
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				if err := e.Export(context.Background(), recs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/n, "cpu-ns/flow")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/flow")
			b.ReportMetric(float64(testing.AllocsPerRun(1, func() { e.Export(context.Background(), recs) }))/n, "allocs/flow")
		})
	}
}

// discardReceiver starts the discarding receiver in a child process and
// returns its address.
func discardReceiver(b *testing.B, protocol string) string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), discardEnv+"="+protocol)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // closed when the benchmark ends: the child exits
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	return strings.TrimSpace(addr)
}

// serveDiscard serves OTLP logs on loopback, answering every request with
// an empty ExportLogsServiceResponse without decoding it; it prints its
// address and runs until stdin closes.
func serveDiscard(protocol string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	if protocol == "http" {
		go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
	} else {
		srv := grpcgo.NewServer(grpcgo.ForceServerCodecV2(rawCodec{}), grpcgo.UnknownServiceHandler(func(_ any, s grpcgo.ServerStream) error {
			var m rawMessage
			if err := s.RecvMsg(&m); err != nil {
				return err
			}
			return s.SendMsg(&rawMessage{})
		}))
		go srv.Serve(l)
	}
	fmt.Println(l.Addr())
	io.Copy(io.Discard, os.Stdin)
}

// cpuTime is the process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

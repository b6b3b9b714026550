package kafka_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/exporter/kafka"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
)

// Benchmarks of the Kafka export path against the local broker
// (kafkatest). Run with `make bench`.

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

// cpuTime is the process's user + system CPU time so far: the broker runs
// in its own process, so this is the exporter's (and the Go runtime's).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkExport is encode + produce + ack of one eviction of 100k flows,
// in the evictor's batches of 1000, to a local broker (topic of 4
// partitions, acks=all, lz4), per message kind. Reported per flow: wall
// time, the process's CPU time (the broker's is not in it), allocations
// (the process's, franz-go's included).
func BenchmarkExport(b *testing.B) {
	const n, batch = 100_000, 1000
	br := kafkatest.Start(b)
	recs := benchRecords(n)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, msg := range []string{"batch", "flow"} {
		b.Run("message="+msg, func(b *testing.B) {
			topic := fmt.Sprintf("bench-%s-%d", msg, time.Now().UnixNano())
			br.CreateTopic(topic, 4)
			e, err := kafka.New(kafka.Config{Conn: flowkafka.Conn{Brokers: []string{br.Addr}}, Topic: topic,
				Message: msg, Linger: 5 * time.Millisecond, NodeName: "node-1", Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			eviction := func() {
				for i := 0; i < n; i += batch {
					if err := e.Export(ctx, recs[i:i+batch]); err != nil {
						b.Fatal(err)
					}
				}
			}
			eviction() // connect, size the buffers
			b.ReportAllocs()
			b.ResetTimer()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			cpu0 := cpuTime()
			for b.Loop() {
				eviction()
			}
			cpu := cpuTime() - cpu0
			runtime.ReadMemStats(&m1)
			flows := float64(b.N) * n
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/flows, "ns/flow")
			b.ReportMetric(float64(cpu.Nanoseconds())/flows, "cpu-ns/flow")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/flows, "allocs/flow")
		})
	}
}

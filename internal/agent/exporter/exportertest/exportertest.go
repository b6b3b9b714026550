// Package exportertest holds what the exporters' benchmarks share (`make
// bench`): an eviction's worth of flows like a node's, and the loop that
// exports them as the agent does and reports the cost per flow, so that
// stdout, grpc, ipfix and kafka are measured alike.
package exportertest

import (
	"bufio"
	"context"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Eviction is the flows per eviction the benchmarks export, and Batch the
// batches the evictor hands them over in (its default --grpc-batch-size).
const (
	Eviction = 100_000
	Batch    = 1000
)

// Records returns n flows like an eviction's on a busy node: IPv4 TCP (with
// an RTT, so enriched) and UDP, one in ten IPv6, each seen on a pod's veth
// and the node's eth0; one in twenty UDP flows has DNS fields, one in
// twenty TCP flows TLS fields. Every flow is distinct.
func Records(n int) []flow.Record {
	out := make([]flow.Record, n)
	start := time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC)
	for i := range out {
		r := &out[i]
		*r = flow.Record{
			SrcAddr: netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), DstAddr: netip.AddrFrom4([4]byte{10, 96, byte(i >> 16), 10}),
			SrcPort: uint16(30000 + i%30000), DstPort: 8080, Proto: 6,
			Bytes: 123456, Packets: 87, TCPFlags: 0x1b | flow.TCPFlagSynAck, EthType: 0x0800, DSCP: 10,
			SrcMAC: [6]byte{0x02, 0x42, 0xac, 0x11, 0, 2}, DstMAC: [6]byte{0x02, 0x42, 0xac, 0x11, 0, 3},
			StartTime: start, EndTime: start.Add(4 * time.Second),
			Interfaces: []flow.Interface{
				{Name: "veth1a2b3c", Ifindex: 7, Netns: "host", NetnsID: 4026531840, Direction: flow.DirIngress},
				{Name: "eth0", Ifindex: 2, Netns: "host", NetnsID: 4026531840, Direction: flow.DirEgress},
			},
			Sampling:  1,
			RTTFields: flow.RTTFields{RTT: 150 * time.Microsecond, RTTMax: time.Millisecond},
		}
		if i%10 == 9 {
			r.SrcAddr = netip.AddrFrom16([16]byte{0xfd, 0, 14: byte(i >> 8), 15: byte(i)})
			r.DstAddr, r.EthType = netip.MustParseAddr("fd00::10"), 0x86dd
		}
		switch {
		case i%4 == 3: // UDP
			r.Proto, r.TCPFlags, r.RTT, r.RTTMax, r.DstPort = 17, 0, 0, 0, 53
			if i%20 == 3 {
				r.DNSID, r.DNSFlags, r.DNSName = uint16(i), flow.DNSFlagRD, "kubernetes.default.svc.cluster.local"
				r.DNSLatency, r.DNSLatencyMax = 300*time.Microsecond, time.Millisecond
			}
		case i%20 == 1:
			r.DstPort, r.TLSVersion, r.TLSCipherSuite, r.TLSGroup = 443, 0x0304, 0x1301, 0x001d
		}
	}
	return out
}

// Run is the exporters' benchmark: each op exports Eviction flows to e in
// batches of Batch, as the agent's queue does after an eviction, then calls
// done (nil: nothing to wait for), which returns once the consumer has them
// all. It reports per flow: ns/flow (wall time), cpu-ns/flow (the process's
// user and system CPU: with an in-process consumer, its CPU too) and
// allocs/flow (the process's, likewise), besides the usual per-op figures.
func Run(b *testing.B, e exporter.Exporter, done func()) {
	recs := Records(Eviction)
	ctx := context.Background()
	op := func() {
		for i := 0; i < len(recs); i += Batch {
			if err := e.Export(ctx, recs[i:i+Batch]); err != nil {
				b.Fatal(err)
			}
		}
		if done != nil {
			done()
		}
	}
	op() // connect, templates, buffers: the steady state is what counts
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	cpu0 := cpuTime()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		op()
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&m1)
	flows := float64(b.N) * Eviction
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/flows, "ns/flow")
	b.ReportMetric(float64(cpu.Nanoseconds())/flows, "cpu-ns/flow")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/flows, "allocs/flow")
}

// cpuTime is the user and system CPU time the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// MaxMarginalAllocs is what NoAllocsPerFlow allows of MarginalAllocs: an
// allocation per flow anywhere would read 1 or more, one per twenty flows
// 0.05; under it is what grows with the bytes inside the transports
// (HTTP/2 window updates and pings as the receiver's windows adapt: up to
// 0.01 per flow of OTLP's 800 bytes in 40 runs of the tests).
const MaxMarginalAllocs = 0.05

// NoAllocsPerFlow is the exporters' TestNoAllocationsPerFlow: it fails t
// when e's MarginalAllocs exceed MaxMarginalAllocs, and logs the figure.
func NoAllocsPerFlow(t *testing.T, e exporter.Exporter, done func()) {
	t.Helper()
	per := MarginalAllocs(t, e, done)
	t.Logf("%.4f allocations per flow", per)
	if per > MaxMarginalAllocs {
		t.Errorf("%.4f allocations per flow, want about 0 (at most %v)", per, MaxMarginalAllocs)
	}
}

// MarginalAllocs is the exporter's allocations per flow in steady state,
// measured as a difference so that what is paid per request (a gRPC call,
// an HTTP request, a Kafka produce: inside those libraries) cancels out:
// Rounds rounds of Requests exports of Batch flows each, against as many
// exports of Batch/10 flows, the same number of calls, requests and
// waits (done, as for Run). An allocation per flow anywhere on the path
// adds at least 1 per flow; what remains is what grows with the bytes
// (HTTP/2 window updates, for one). The smallest of the rounds is
// returned: a background allocation (the runtime's, a timer's) can only
// add.
func MarginalAllocs(t testing.TB, e exporter.Exporter, done func()) float64 {
	const (
		requests = 10
		rounds   = 3
	)
	big := Records(requests * Batch)
	small := Records(requests * Batch / 10)
	ctx := context.Background()
	export := func(recs []flow.Record, n int) uint64 {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for i := 0; i < len(recs); i += n {
			if err := e.Export(ctx, recs[i:i+n]); err != nil {
				t.Fatal(err)
			}
		}
		if done != nil {
			done()
		}
		runtime.ReadMemStats(&m1)
		return m1.Mallocs - m0.Mallocs
	}
	export(big, Batch) // connections, templates, buffers at their size
	export(small, Batch/10)
	best := math.Inf(1)
	for range rounds {
		b, s := export(big, Batch), export(small, Batch/10)
		best = min(best, (float64(b)-float64(s))/float64(len(big)-len(small)))
	}
	return best
}

// Child runs the test binary again as a server in a child process, with
// env ("NAME=value") added to its environment for its TestMain to see,
// and returns the first line it prints (its addresses). The child's
// stdin is closed at tb's cleanup: it exits when it reads EOF there. A
// receiver out of the process keeps its CPU and allocations out of the
// figures.
func Child(tb testing.TB, env string) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatalf("child server: %v", err)
	}
	return strings.TrimSpace(line)
}

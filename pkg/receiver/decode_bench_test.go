package receiver

import (
	"net/netip"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// agentBatch is n flows as an agent encodes them: two interfaces each,
// IPv4, every fourth with drops, every eighth with a DNS name.
func agentBatch(n int) []byte {
	recs := make([]flow.Record, n)
	t0 := time.Unix(1_700_000_000, 0)
	for i := range recs {
		r := &recs[i]
		r.SrcAddr = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		r.DstAddr = netip.AddrFrom4([4]byte{10, 1, 0, 7})
		r.SrcPort, r.DstPort, r.Proto = uint16(30000+i), 443, 6
		r.Bytes, r.Packets, r.TCPFlags, r.EthType = uint64(1500*i+60), uint64(i+1), 0x18, 0x0800
		r.SrcMAC, r.DstMAC = [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
		r.StartTime, r.EndTime = t0, t0.Add(5*time.Second)
		r.Interfaces = []flow.Interface{{Name: "eth0", Netns: "host", Ifindex: 2, Direction: flow.DirIngress},
			{Name: "veth12ab34cd", Netns: "cni-0f3a9c2e-77aa", Ifindex: 9, Direction: flow.DirEgress}}
		r.Sampling = 1
		if i%4 == 0 {
			r.DropPackets, r.DropBytes, r.DropCause, r.DropTCPState = 1, 60, "NETFILTER_DROP", "ESTABLISHED"
		}
		if i%8 == 0 {
			r.DNSID, r.DNSName, r.DNSLatency = uint16(i), "api.example.com", time.Millisecond
		}
	}
	return flowpb.AppendBatch(nil, recs, "node-a.example.internal", []byte{192, 0, 2, 7})
}

// BenchmarkDecode: a 1000-flow agent batch decoded as the server did before
// the pre-scan (unmarshal the FlowBatch, count, validate each flow) and as
// it does now (flowpb.DecodeBatch: count and measure on the wire, then
// unmarshal each flow into one array and validate); and the pre-scan alone.
func BenchmarkDecode(b *testing.B) {
	wire := agentBatch(1000)
	b.Run("unmarshal-validate", func(b *testing.B) {
		b.SetBytes(int64(len(wire)))
		b.ReportAllocs()
		for b.Loop() {
			var m flowv1.FlowBatch
			if err := proto.Unmarshal(wire, &m); err != nil {
				b.Fatal(err)
			}
			if len(m.Flows) > DefaultMaxFlowsPerBatch {
				b.Fatal("too many")
			}
			for _, f := range m.Flows {
				if err := flowpb.Validate(f); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/flow")
	})
	b.Run("prescan-decode", func(b *testing.B) {
		b.SetBytes(int64(len(wire)))
		b.ReportAllocs()
		for b.Loop() {
			flows, refused, err := flowpb.DecodeBatch(wire, DefaultMaxFlowsPerBatch)
			if err != nil || len(flows) != 1000 || len(refused) != 0 {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/flow")
	})
	b.Run("prescan-only", func(b *testing.B) {
		b.SetBytes(int64(len(wire)))
		b.ReportAllocs()
		for b.Loop() {
			if n, err := flowpb.CountFlows(wire); err != nil || n != 1000 {
				b.Fatal(err)
			}
			for rest := wire; len(rest) > 0; {
				_, _, l := protowire.ConsumeTag(rest)
				f, m := protowire.ConsumeBytes(rest[l:])
				if err := flowpb.ScanFlow(f); err != nil {
					b.Fatal(err)
				}
				rest = rest[l+m:]
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/flow")
	})
}

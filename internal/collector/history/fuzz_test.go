package history

import (
	"net/netip"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/flowquery"
)

// FuzzGetFlowsRequest feeds the history's request path any bytes, as a
// GetFlows client may send them: the wire check (RequestTerms) never
// panics and never counts fewer terms than the decoded request holds (the
// bound it enforces before decoding holds after), a request it lets
// through decodes or is refused with InvalidArgument, and a decoded one
// compiles (flowquery) or is refused, and matches flows without panicking.
func FuzzGetFlowsRequest(f *testing.F) {
	for _, req := range []*flowv1.GetFlowsRequest{
		{},
		{Last: 20, Follow: true, SkipHistory: true},
		{Since: timestamppb.New(time.Unix(1e9, 0)), Until: timestamppb.New(time.Unix(2e9, 0))},
		{Filters: []*flowv1.FlowFilter{{Namespace: []string{"shop"}, Pod: []string{"shop/web-1"}, Port: []uint32{53, 443}}}},
		{Filters: []*flowv1.FlowFilter{{Not: true, Ip: []string{"10.0.0.0/8"}, FromIp: []string{"fd00::1"}, ToPort: []uint32{70000}}}},
		{Filters: []*flowv1.FlowFilter{{Drops: true, DropCause: []string{"NETFILTER_DROP"}, TcpFlags: []uint32{0x102}, DnsRcode: []uint32{3}},
			{RttAbove: durationpb.New(time.Millisecond), Protocol: []uint32{6, 17}, Node: []string{"node-a"}, Workload: []string{"db"}}}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x05, 0x4a})                   // truncated filter
	f.Add([]byte{0x0a, 0x04, 0x4a, 0x02, 0x80, 0x80}) // packed ports, unterminated varint
	f.Add([]byte{0x0a, 0x02, 0x4d, 0x01})             // port as fixed32
	s := NewService(Options{Size: 1, MaxFilterTerms: 64})
	flows := fuzzFlows()
	f.Fuzz(func(t *testing.T, data []byte) {
		terms, werr := RequestTerms(data)
		var req flowv1.GetFlowsRequest
		if derr := proto.Unmarshal(data, &req); derr == nil && werr == nil && countTerms(&req) > terms {
			t.Fatalf("wire check counted %d terms, the decoded request holds %d", terms, countTerms(&req))
		}
		req.Reset()
		if err := s.decodeRequest(data, &req); err != nil {
			return
		}
		if n := countTerms(&req); n > 64 {
			t.Fatalf("a request of %d terms got past a bound of 64", n)
		}
		q, err := flowquery.Compile(req.Filters)
		if err != nil {
			return
		}
		for i := range flows {
			q.Match(&flows[i])
		}
	})
}

// fuzzFlows are flows with every field a criterion reads set, enriched or
// not.
func fuzzFlows() []enriched.Flow {
	fs := flowsN(53, 2)
	fs[0].Enriched = true
	fs[0].Src = enriched.K8sContext{Kind: enriched.KindPod, Namespace: "shop", Name: "web-1", Workload: "web", WorkloadKind: "Deployment", Node: "node-a"}
	fs[0].Dst = enriched.K8sContext{Kind: enriched.KindService, Namespace: "kube-system", Name: "kube-dns", Workload: "kube-dns"}
	fs[0].NodeName, fs[0].DropPackets, fs[0].DropCause, fs[0].TCPFlags, fs[0].RTT = "node-a", 1, "NETFILTER_DROP", 0x12, time.Second
	fs[1].SrcAddr, fs[1].DNSID, fs[1].DNSFlags, fs[1].DNSRcode = netip.MustParseAddr("fd00::1"), 1, 0x8183, 3
	return fs
}

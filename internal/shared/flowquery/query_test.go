package flowquery

import (
	"net/netip"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

func podCtx(ns, name, wl string) enriched.K8sContext {
	return enriched.K8sContext{Kind: enriched.KindPod, Namespace: ns, Name: name, Workload: wl, WorkloadKind: "Deployment", Node: "n"}
}

// base is a TCP flow from shop/web-1 to data/db-0, seen on node-a, with a
// drop and an RTT: each criterion's test changes just what it reads.
func base() *enriched.Flow {
	f := &enriched.Flow{NodeName: "node-a", Enriched: true, Src: podCtx("shop", "web-1", "web"), Dst: podCtx("data", "db-0", "db")}
	f.SrcAddr, f.DstAddr = netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1")
	f.SrcPort, f.DstPort, f.Proto = 40000, 5432, 6
	f.TCPFlags = 0x02 | 0x10
	f.RTT = 3 * time.Millisecond
	f.DropPackets, f.DropCause = 1, "NETFILTER_DROP"
	return f
}

type matchCase struct {
	ff   *flowv1.FlowFilter
	f    *enriched.Flow
	want bool
}

// checkMatches compiles each case's filter alone and matches its flow, then
// again with the filter negated, which must give the opposite.
func checkMatches(t *testing.T, cases []matchCase) {
	t.Helper()
	for _, tc := range cases {
		q, err := Compile([]*flowv1.FlowFilter{tc.ff})
		if err != nil {
			t.Fatal(err)
		}
		if got := q.Match(tc.f); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.ff, got, tc.want)
		}
		tc.ff.Not = true
		q, _ = Compile([]*flowv1.FlowFilter{tc.ff})
		if got := q.Match(tc.f); got == tc.want {
			t.Errorf("not %v: %v, want %v", tc.ff, got, !tc.want)
		}
		tc.ff.Not = false
	}
}

// checkErrors compiles each bad filter as the second of a query: the error
// names its index and field.
func checkErrors(t *testing.T, cases map[string]*flowv1.FlowFilter) {
	t.Helper()
	for want, ff := range cases {
		q, err := Compile([]*flowv1.FlowFilter{{}, ff})
		if err == nil || err.Error() != want || q != nil {
			t.Errorf("%v: %v %v, want error %q", ff, q, err, want)
		}
	}
}

// Criteria of one filter all hold (AND); filters all hold (AND); no filter
// matches every flow; a not negates its filter only.
func TestQueryTerms(t *testing.T) {
	f := base()
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{Namespace: []string{"data"}, Port: []uint32{5432}}, f, true},
		{&flowv1.FlowFilter{Namespace: []string{"data"}, Port: []uint32{1}}, f, false},
		{&flowv1.FlowFilter{}, f, true},
	})
	for _, tc := range []struct {
		name string
		q    []*flowv1.FlowFilter
		want bool
	}{
		{"none", nil, true},
		{"both hold", []*flowv1.FlowFilter{{Node: []string{"node-a"}}, {Port: []uint32{5432}}}, true},
		{"second fails", []*flowv1.FlowFilter{{Node: []string{"node-a"}}, {Port: []uint32{1}}}, false},
		{"second negated", []*flowv1.FlowFilter{{Node: []string{"node-a"}}, {Not: true, Port: []uint32{1}}}, true},
		{"first negated", []*flowv1.FlowFilter{{Not: true, Node: []string{"node-a"}}, {Port: []uint32{5432}}}, false},
	} {
		q, err := Compile(tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := q.Match(f); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Every field of FlowFilter but not is a criterion: set alone, it compiles
// to a check. A field added to history.proto without its file here fails.
func TestEveryFieldIsACriterion(t *testing.T) {
	fields := (&flowv1.FlowFilter{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Name() == "not" {
			continue
		}
		ff := &flowv1.FlowFilter{}
		m := ff.ProtoReflect()
		switch {
		case fd.Name() == "tcp_result": // a fixed vocabulary
			m.Mutable(fd).List().Append(protoreflect.ValueOfString(TCPResults[0]))
		case fd.IsList() && fd.Kind() == protoreflect.StringKind:
			m.Mutable(fd).List().Append(protoreflect.ValueOfString("10.0.0.1"))
		case fd.IsList() && fd.Kind() == protoreflect.Uint32Kind:
			m.Mutable(fd).List().Append(protoreflect.ValueOfUint32(1))
		case fd.Kind() == protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(true))
		case fd.Kind() == protoreflect.MessageKind && fd.Message().FullName() == "google.protobuf.Duration":
			m.Set(fd, protoreflect.ValueOfMessage(durationpb.New(time.Millisecond).ProtoReflect()))
		default:
			t.Errorf("field %s: a kind this test does not set (%v): teach it", fd.Name(), fd.Kind())
			continue
		}
		q, err := Compile([]*flowv1.FlowFilter{ff})
		if err != nil {
			t.Errorf("field %s: %v", fd.Name(), err)
			continue
		}
		if len(q) != 1 || len(q[0].checks) != 1 {
			t.Errorf("field %s set: compiled to %+v, want one check (is it in criteria?)", fd.Name(), q)
		}
	}
}

// Terms counts each filter and each value of its repeated fields.
func TestTerms(t *testing.T) {
	if n := Terms(nil); n != 0 {
		t.Errorf("no filter: %d", n)
	}
	fs := []*flowv1.FlowFilter{{}, {Not: true, Drops: true, Namespace: []string{"a", "b"}, Port: []uint32{1, 2, 3}, DnsRcode: []uint32{3}},
		{Pod: []string{"p"}, Workload: []string{"w"}, Node: []string{"n"}, Ip: []string{"i"}, FromIp: []string{"f"}, ToIp: []string{"t"},
			FromPort: []uint32{1}, ToPort: []uint32{2}, Protocol: []uint32{6}, DropCause: []string{"c"}, TcpFlags: []uint32{2}}}
	if n := Terms(fs); n != 1+7+12 {
		t.Errorf("Terms = %d, want 20", n)
	}
}

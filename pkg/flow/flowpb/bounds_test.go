package flowpb_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// boundedFields walks md's fields and their messages' (not the well-known
// Timestamp, which holds numbers only), calling fn with the path from Flow
// of each string, bytes and repeated field.
func boundedFields(md protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor, fn func([]protoreflect.FieldDescriptor)) {
	fs := md.Fields()
	for i := range fs.Len() {
		fd := fs.Get(i)
		p := append(append([]protoreflect.FieldDescriptor(nil), path...), fd)
		if fd.IsList() || fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind {
			fn(p)
		}
		if fd.Kind() == protoreflect.MessageKind && fd.Message().FullName() != "google.protobuf.Timestamp" {
			boundedFields(fd.Message(), p, fn)
		}
	}
}

// Every string, bytes and repeated field of a Flow, at any depth, has a
// bound, and every bound names such a field: a feature that adds a string
// must bound it.
func TestBoundsCoverEveryField(t *testing.T) {
	seen := map[protoreflect.FullName]bool{}
	boundedFields((&flowv1.Flow{}).ProtoReflect().Descriptor(), nil, func(p []protoreflect.FieldDescriptor) {
		fd := p[len(p)-1]
		seen[fd.FullName()] = true
		if flowpb.Bounds[fd.FullName()] <= 0 {
			t.Errorf("%s has no bound in flowpb.Bounds", fd.FullName())
		}
	})
	for name := range flowpb.Bounds {
		if !seen[name] {
			t.Errorf("flowpb.Bounds has %s: no string, bytes or repeated field of a Flow", name)
		}
	}
}

func goodFlow() *flowv1.Flow {
	return &flowv1.Flow{SrcAddr: []byte{10, 0, 0, 1}, DstAddr: []byte{10, 0, 0, 2}, SrcPort: 1, DstPort: 2, Proto: 17,
		StartTime: timestamppb.New(time.Unix(1e9, 0)), EndTime: timestamppb.New(time.Unix(1e9, 5)), NodeName: "node-a",
		Interfaces: []*flowv1.Interface{{Name: "eth0", Netns: "host", Direction: flowv1.Direction_DIRECTION_INGRESS}}}
}

// setLen sets the field at path in f to n bytes or elements: a string of
// 'a's, bytes of 10s, a list of n copies of its first element (or of an
// empty element).
func setLen(f *flowv1.Flow, path []protoreflect.FieldDescriptor, n int) {
	m := f.ProtoReflect()
	for _, fd := range path[:len(path)-1] {
		if fd.IsList() {
			l := m.Mutable(fd).List()
			if l.Len() == 0 {
				l.Append(l.NewElement())
			}
			m = l.Get(0).Message()
			continue
		}
		m = m.Mutable(fd).Message()
	}
	fd := path[len(path)-1]
	switch {
	case fd.IsList():
		l := m.Mutable(fd).List()
		for l.Len() < n {
			l.Append(protoreflect.ValueOfMessage(l.NewElement().Message()))
		}
		l.Truncate(n)
	case fd.Kind() == protoreflect.StringKind:
		m.Set(fd, protoreflect.ValueOfString(strings.Repeat("a", n)))
	default:
		m.Set(fd, protoreflect.ValueOfBytes([]byte(strings.Repeat("\x0a", n))))
	}
}

func batchOf(t testing.TB, flows ...*flowv1.Flow) []byte {
	t.Helper()
	b, err := proto.Marshal(&flowv1.FlowBatch{Flows: flows})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Each bounded field at its bound passes ScanFlow, Validate and
// DecodeBatch; one byte or element more is refused by all three, naming
// the field, and DecodeBatch keeps the flows around the refused one.
func TestBoundsRefuseOneMore(t *testing.T) {
	boundedFields((&flowv1.Flow{}).ProtoReflect().Descriptor(), nil, func(p []protoreflect.FieldDescriptor) {
		fd := p[len(p)-1]
		max := flowpb.Bounds[fd.FullName()]
		t.Run(string(fd.FullName()), func(t *testing.T) {
			atMax := goodFlow()
			setLen(atMax, p, max)
			over := goodFlow()
			setLen(over, p, max+1)
			wire, err := proto.Marshal(over)
			if err != nil {
				t.Fatal(err)
			}
			var be *flowpb.BoundError
			if err := flowpb.ScanFlow(wire); !errors.As(err, &be) || be.Len != max+1 || be.Max != max || !strings.HasSuffix(be.Field, string(fd.Name())) {
				t.Errorf("ScanFlow(%d) = %v, want a BoundError of %s, %d, max %d", max+1, err, fd.Name(), max+1, max)
			}
			// Strings and lists: a BoundError; addresses and MACs:
			// Validate's exact lengths come first.
			err = flowpb.Validate(over)
			if fd.Kind() == protoreflect.BytesKind && !fd.IsList() {
				if !errors.Is(err, flowpb.ErrInvalid) {
					t.Errorf("Validate(%d) = %v, want ErrInvalid", max+1, err)
				}
			} else if !errors.As(err, &be) || !errors.Is(err, flowpb.ErrInvalid) || be.Error() != fmt.Sprint(err) {
				t.Errorf("Validate(%d) = %v, want a BoundError", max+1, err)
			}
			if wire, _ := proto.Marshal(atMax); flowpb.ScanFlow(wire) != nil {
				t.Errorf("ScanFlow(%d) = %v, want nil", max, flowpb.ScanFlow(wire))
			}
			// Validate's exact checks (address and MAC lengths) refuse
			// some lengths below the bound: only the bound is checked here.
			if err := flowpb.Validate(atMax); errors.Is(err, flowpb.ErrBound) {
				t.Errorf("Validate(%d) = %v", max, err)
			}
			flows, refused, err := flowpb.DecodeBatch(batchOf(t, goodFlow(), over, goodFlow()), 10)
			if err != nil || len(flows) != 2 || len(refused) != 1 || refused[0].Index != 1 || refused[0].Err.Len != max+1 {
				t.Errorf("DecodeBatch: %d flows, refused %+v, error %v; want 2 flows and flows[1] refused", len(flows), refused, err)
			}
		})
	})
}

// The field path of a refusal inside a list names the element.
func TestBoundErrorPath(t *testing.T) {
	f := goodFlow()
	f.Interfaces = append(f.Interfaces, &flowv1.Interface{Name: "a-name-of-sixteen"[:16]})
	f.Dns = &flowv1.DNS{DnsName: strings.Repeat("x", 300)}
	wire, _ := proto.Marshal(f)
	if err := flowpb.ScanFlow(wire); err == nil || err.Error() != "interfaces[1].name has 16 bytes, max 15" {
		t.Errorf("ScanFlow = %v", err)
	}
	if err := flowpb.Validate(f); err == nil || err.Error() != "interfaces[1].name has 16 bytes, max 15" {
		t.Errorf("Validate = %v", err)
	}
	f.Interfaces = f.Interfaces[:1]
	wire, _ = proto.Marshal(f)
	if err := flowpb.ScanFlow(wire); err == nil || err.Error() != "dns.dns_name has 300 bytes, max 253" {
		t.Errorf("ScanFlow = %v", err)
	}
}

// emptyFlows is a FlowBatch of n empty flows: 2 bytes each on the wire.
func emptyFlows(n int) []byte {
	b := make([]byte, 0, 2*n)
	for range n {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, 0)
	}
	return b
}

// A message of empty flows beyond the count is refused before anything is
// decoded: 4 MiB of them allocate (almost) nothing, and the error says how
// many there were.
func TestDecodeBatchTooManyFlows(t *testing.T) {
	b := emptyFlows(2 << 20) // 4 MiB
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	flows, _, err := flowpb.DecodeBatch(b, 100_000)
	runtime.ReadMemStats(&after)
	if flows != nil || err == nil || err.Error() != "2097152 flows in one message, max 100000" {
		t.Fatalf("DecodeBatch = %d flows, %v", len(flows), err)
	}
	var tm *flowpb.TooManyFlowsError
	if !errors.As(err, &tm) || tm.N != 2<<20 || tm.Max != 100_000 {
		t.Errorf("error %#v, want a TooManyFlowsError", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
		t.Errorf("refusing it allocated %d bytes", d)
	}
	// At the limit: decoded, in one array.
	flows, refused, err := flowpb.DecodeBatch(emptyFlows(100_000), 100_000)
	if err != nil || len(flows) != 100_000 || len(refused) != 0 {
		t.Fatalf("DecodeBatch at the limit = %d flows, %d refused, %v", len(flows), len(refused), err)
	}
}

// What does not parse is ErrMalformed; an invalid flow is ErrInvalid,
// naming its index.
func TestDecodeBatchErrors(t *testing.T) {
	good := batchOf(t, goodFlow())
	bad := goodFlow()
	bad.SrcAddr = []byte{1, 2, 3}
	for name, tc := range map[string]struct {
		b    []byte
		want error
		text string
	}{
		"truncated":        {good[:len(good)-1], flowpb.ErrMalformed, ""},
		"bad tag":          {[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, flowpb.ErrMalformed, ""},
		"flows as varint":  {[]byte{0x08, 0x01}, flowpb.ErrMalformed, ""},
		"truncated inside": {append(protowire.AppendVarint([]byte{0x0a}, 3), 0x0a, 0x05, 0x01), flowpb.ErrMalformed, ""},
		"invalid flow":     {batchOf(t, goodFlow(), bad), flowpb.ErrInvalid, "flows[1]: invalid flow: src_addr has 3 bytes, want 4 or 16"},
		"not utf-8":        {batchOf(t, goodFlow(), &flowv1.Flow{}), nil, ""},
	} {
		if name == "not utf-8" {
			// node_name of invalid UTF-8, written by hand (Marshal refuses).
			f := protowire.AppendTag(nil, 29, protowire.BytesType)
			f = protowire.AppendBytes(f, []byte{0xff})
			tc.b = protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), f)
			tc.want = flowpb.ErrMalformed
		}
		_, _, err := flowpb.DecodeBatch(tc.b, 10)
		if !errors.Is(err, tc.want) || (tc.text != "" && err.Error() != tc.text) {
			t.Errorf("%s: %v, want %v %q", name, err, tc.want, tc.text)
		}
	}
	if _, _, err := flowpb.DecodeBatch(nil, 10); err != nil {
		t.Errorf("empty message: %v", err)
	}
}

// DecodeBatch gives the flows proto.Unmarshal gives, for the agent's own
// encoding of random records (any values, any lengths), refuses exactly
// those beyond a bound, and fails on the first other invalid one, as
// Validate says.
func TestDecodeBatchMatchesUnmarshal(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	var ok, failed int
	for range 200 {
		recs := randRecords(rng, 1+rng.IntN(8))
		b := flowpb.AppendBatch(nil, recs, "node-1", []byte{192, 0, 2, 1})
		var want flowv1.FlowBatch
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		flows, refused, err := flowpb.DecodeBatch(b, 1000)
		var kept []*flowv1.Flow
		var wantRefused []int
		var wantErr string
		for i, w := range want.Flows {
			verr := flowpb.Validate(w)
			switch {
			case errors.Is(verr, flowpb.ErrBound):
				wantRefused = append(wantRefused, i)
			case verr != nil:
				wantErr = fmt.Sprintf("flows[%d]: %v", i, verr)
			default:
				kept = append(kept, w)
			}
			if wantErr != "" {
				break
			}
		}
		if wantErr != "" {
			if err == nil || err.Error() != wantErr {
				t.Fatalf("DecodeBatch: %v, want %s", err, wantErr)
			}
			failed++
			continue
		}
		if err != nil || len(flows) != len(kept) || len(refused) != len(wantRefused) {
			t.Fatalf("DecodeBatch: %d flows, %d refused, %v; want %d and %v", len(flows), len(refused), err, len(kept), wantRefused)
		}
		for i := range kept {
			if !proto.Equal(flows[i], kept[i]) {
				t.Fatalf("flow %d decoded differently", i)
			}
		}
		for i, r := range refused {
			if r.Index != wantRefused[i] {
				t.Fatalf("refused %+v, want indexes %v", refused, wantRefused)
			}
		}
		ok++
	}
	t.Logf("%d batches decoded, %d refused as invalid", ok, failed)
}

// Bound constants agree with the kernel's and Kubernetes' numbers they
// stand for (written here once more on purpose).
func TestBoundValues(t *testing.T) {
	if flow.MaxInterfaces != 6 || flow.MaxInterfaceName != 15 || flow.MaxNodeName != 253 {
		t.Errorf("bounds changed: %d interfaces, names %d, node %d", flow.MaxInterfaces, flow.MaxInterfaceName, flow.MaxNodeName)
	}
	// The agent's longest dns_name (every byte escaped) is within the bound.
	wire := append([]byte{63}, []byte(strings.Repeat("\x01", 63))...)
	if name, _ := flow.DNSNameFromWire(wire[:flow.DNSMaxWireName]); len(name) > flow.MaxDNSName {
		t.Errorf("the agent's longest dns_name has %d bytes, bound %d", len(name), flow.MaxDNSName)
	}
}

// CountFlowsChunks counts as CountFlows does, wherever the message is cut
// into pieces, and refuses the same malformed framing.
func TestCountFlowsChunks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	msgs := [][]byte{emptyFlows(1000), batchOf(t, goodFlow(), goodFlow()), {0x0a, 0x05, 0x01}, {0xff}, {0x08, 0x96, 0x01, 0x0a, 0x00},
		flowpb.AppendBatch(nil, randRecords(rng, 20), "n", nil), {0x0d, 1, 2, 3, 4, 0x11, 1, 2, 3, 4, 5, 6, 7, 8}, {0x0b}}
	for i, m := range msgs {
		want, werr := flowpb.CountFlows(m)
		for range 20 {
			var chunks [][]byte
			for rest := m; len(rest) > 0; {
				k := 1 + rng.IntN(min(len(rest), 7))
				chunks = append(chunks, rest[:k])
				if rng.IntN(4) == 0 {
					chunks = append(chunks, nil)
				}
				rest = rest[k:]
			}
			got, err := flowpb.CountFlowsChunks(chunks)
			if (werr == nil) != (err == nil) || (werr == nil && got != want) {
				t.Fatalf("message %d in %d chunks: %d, %v; CountFlows %d, %v", i, len(chunks), got, err, want, werr)
			}
		}
	}
}

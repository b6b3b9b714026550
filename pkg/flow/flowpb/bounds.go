package flowpb

// Bounds, checked on the wire before a message is decoded: a receiver
// must not let a sender choose how much memory a message becomes. An empty
// Flow is 2 bytes on the wire and several hundred in memory, an Interface
// 2 bytes and about a hundred, so a FlowBatch is counted and each flow's
// strings and lists measured (ScanFlow) before proto.Unmarshal allocates
// anything (DecodeBatch).

import (
	"errors"
	"fmt"
	"io"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Bounds are the most bytes each string and bytes field of a Flow (and of
// its sub-messages) may hold, and the most elements of its repeated
// field, by the field's full protobuf name. Every such field has one (a
// test walks the descriptors): a feature that adds a string adds its
// bound here. The values are pkg/flow's (what an agent sends) and the
// address and MAC sizes.
var Bounds = map[protoreflect.FullName]int{
	"flowlens.flow.v1.Flow.src_addr":          16,
	"flowlens.flow.v1.Flow.dst_addr":          16,
	"flowlens.flow.v1.Flow.src_mac":           6,
	"flowlens.flow.v1.Flow.dst_mac":           6,
	"flowlens.flow.v1.Flow.agent_ip":          16,
	"flowlens.flow.v1.Flow.node_name":         flow.MaxNodeName,
	"flowlens.flow.v1.Flow.interfaces":        flow.MaxInterfaces,
	"flowlens.flow.v1.Interface.name":         flow.MaxInterfaceName,
	"flowlens.flow.v1.Interface.netns":        flow.MaxNetnsName,
	"flowlens.flow.v1.Drops.drop_cause":       flow.MaxDropCause,
	"flowlens.flow.v1.Drops.drop_tcp_state":   flow.MaxDropTCPState,
	"flowlens.flow.v1.Xlat.xlat_src_addr":     16,
	"flowlens.flow.v1.Xlat.xlat_dst_addr":     16,
	"flowlens.flow.v1.DNS.dns_name":           flow.MaxDNSName,
	"flowlens.flow.v1.Flow.src_dns_name":      flow.MaxDNSName,
	"flowlens.flow.v1.Flow.dst_dns_name":      flow.MaxDNSName,
	"flowlens.flow.v1.Tunnel.tunnel_src_addr": 16,
	"flowlens.flow.v1.Tunnel.tunnel_dst_addr": 16,
	"flowlens.flow.v1.TCP.tcp_role":           flow.MaxTCPRole,
}

// MaxMessageBytes is the largest FlowBatch message a collector takes by
// default (pkg/receiver's DefaultMaxMessageBytes, its
// --max-message-bytes), and the size at which the agent's gRPC exporter
// splits a batch: gRPC's own default receive limit, so that any
// FlowCollector server takes an agent's messages, and small enough that a
// hostile message costs the collector little before it is refused.
const MaxMessageBytes = 4 << 20

// MaxFlowsPerMessage is the most flows in one FlowBatch message that a
// collector takes by default (pkg/receiver's DefaultMaxFlowsPerBatch, its
// --max-flows-per-batch) and at which the agent's gRPC exporter splits a
// batch, whatever the flows' sizes.
const MaxFlowsPerMessage = 100_000

// ErrBound marks a flow that holds a string, bytes or list longer than
// its bound (Bounds). It also matches ErrInvalid.
var ErrBound = errors.New("beyond its bound")

// ErrMalformed marks wire bytes that are not a protobuf message.
var ErrMalformed = errors.New("malformed")

// BoundError is a field of a flow beyond its bound.
type BoundError struct {
	Field string // the field's path in the flow: "interfaces[1].name", "dns.dns_name"
	Len   int    // its bytes, or elements for a list
	Max   int
	List  bool
}

func (e *BoundError) Error() string {
	unit := "bytes"
	if e.List {
		unit = "elements"
	}
	return fmt.Sprintf("%s has %d %s, max %d", e.Field, e.Len, unit, e.Max)
}

// Unwrap makes a BoundError match ErrBound and ErrInvalid.
func (e *BoundError) Unwrap() []error { return []error{ErrBound, ErrInvalid} }

// TooManyFlowsError is a FlowBatch of more flows than a receiver takes.
type TooManyFlowsError struct{ N, Max int }

func (e *TooManyFlowsError) Error() string {
	return fmt.Sprintf("%d flows in one message, max %d", e.N, e.Max)
}

// scanField is how ScanFlow treats one field number of a message.
type scanField struct {
	name string
	max  int        // bytes of a string or bytes field, elements of a list; 0: none
	list bool       // repeated: max counts elements
	slot int        // a list's counter in scanMessage
	sub  *scanTable // a message whose fields have bounds (nil: skipped whole)
}

// scanTable is a message's fields by number (those without a bound and
// without bounded sub-fields are absent).
type scanTable struct {
	fields []scanField // index: field number
}

func (t *scanTable) field(n protowire.Number) *scanField {
	if int(n) < len(t.fields) && t.fields[n].name != "" {
		return &t.fields[n]
	}
	return nil
}

// maxLists bounds the repeated fields of one message (Flow has one).
const maxLists = 4

// flowScan is Flow's table, built from the descriptors and Bounds.
var flowScan = buildScan((&flowv1.Flow{}).ProtoReflect().Descriptor())

// buildScan builds the table of md: its fields with a bound, and its
// message fields whose own fields have some. Nil when md has neither.
func buildScan(md protoreflect.MessageDescriptor) *scanTable {
	t := &scanTable{}
	lists := 0
	fs := md.Fields()
	for i := range fs.Len() {
		fd := fs.Get(i)
		f := scanField{name: string(fd.Name()), list: fd.IsList()}
		f.max = Bounds[fd.FullName()]
		if fd.Kind() == protoreflect.MessageKind {
			f.sub = buildScan(fd.Message())
		}
		if f.max == 0 && (f.list || f.sub == nil) {
			// A list needs a bound; a field without one is skipped.
			if f.list {
				panic("flowpb: repeated field " + string(fd.FullName()) + " has no bound in Bounds")
			}
			continue
		}
		if f.list {
			f.slot = lists
			if lists++; lists > maxLists {
				panic("flowpb: more than maxLists repeated fields in " + string(md.FullName()))
			}
		}
		if n := int(fd.Number()); n >= len(t.fields) {
			t.fields = append(t.fields, make([]scanField, n+1-len(t.fields))...)
		}
		t.fields[fd.Number()] = f
	}
	if len(t.fields) == 0 {
		return nil
	}
	return t
}

// CountFlows returns how many flows FlowBatch wire bytes b hold, reading
// only their tags and lengths. An error wraps ErrMalformed.
func CountFlows(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		num, _, _, rest, err := consumeField(b)
		if err != nil {
			return n, malformed("FlowBatch", err)
		}
		if num == 1 {
			n++
		}
		b = rest
	}
	return n, nil
}

// consumeField splits the first field off b: its number, wire type and
// value (with a length prefix for BytesType), and the rest. The common
// cases (one-byte tags, varints, fixed sizes, lengths) are inlined: it
// runs for every field of every flow received.
func consumeField(b []byte) (num protowire.Number, typ protowire.Type, v, rest []byte, err error) {
	var tag uint64
	if len(b) > 0 && b[0] < 0x80 {
		tag, rest = uint64(b[0]), b[1:]
	} else {
		t, l := protowire.ConsumeVarint(b)
		if l < 0 {
			return 0, 0, nil, nil, protowire.ParseError(l)
		}
		tag, rest = t, b[l:]
	}
	if tag>>3 < uint64(protowire.MinValidNumber) || tag>>3 > uint64(protowire.MaxValidNumber) {
		return 0, 0, nil, nil, fmt.Errorf("field number %d", tag>>3)
	}
	num, typ = protowire.Number(tag>>3), protowire.Type(tag&7)
	n := -1
	switch typ {
	case protowire.VarintType:
		for i := 0; i < len(rest) && i < 10; i++ {
			if rest[i] < 0x80 {
				if i < 9 || rest[i] <= 1 { // a tenth byte above 1 overflows 64 bits
					n = i + 1
				}
				break
			}
		}
	case protowire.Fixed32Type:
		if len(rest) >= 4 {
			n = 4
		}
	case protowire.Fixed64Type:
		if len(rest) >= 8 {
			n = 8
		}
	case protowire.BytesType:
		if len(rest) > 0 && rest[0] < 0x80 {
			n = 1 + int(rest[0])
		} else if l, m := protowire.ConsumeVarint(rest); m > 0 && l <= uint64(len(rest)) {
			n = m + int(l)
		}
		if n > len(rest) {
			n = -1
		}
	default: // groups, reserved types: protowire's (rare, and refused by Unmarshal if wrong)
		n = protowire.ConsumeFieldValue(num, typ, rest)
		if n < 0 {
			return 0, 0, nil, nil, protowire.ParseError(n)
		}
	}
	if n < 0 {
		return 0, 0, nil, nil, fmt.Errorf("field %d: truncated or overlong value", num)
	}
	return num, typ, rest[:n], rest[n:], nil
}

func malformed(what string, err error) error {
	return fmt.Errorf("%w %s: %w", ErrMalformed, what, err)
}

// ScanFlow checks one Flow's wire bytes against Bounds without decoding
// them: nil, a *BoundError (the first field beyond its bound), or an
// error wrapping ErrMalformed. Fields it has no bound for are skipped
// (proto.Unmarshal checks them).
func ScanFlow(b []byte) error {
	return scanMessage(b, flowScan)
}

// within prefixes the path of a sub-message's field beyond its bound with
// the field holding it (only then: a path per field scanned would
// allocate).
func within(err error, prefix string) error {
	if be, ok := err.(*BoundError); ok {
		be.Field = prefix + "." + be.Field
	}
	return err
}

func scanMessage(b []byte, t *scanTable) error {
	var counts [maxLists]int // elements seen of each repeated field, by its slot
	for len(b) > 0 {
		num, typ, v, rest, err := consumeField(b)
		if err != nil {
			return malformed("Flow", err)
		}
		b = rest
		f := t.field(num)
		if f == nil || typ != protowire.BytesType {
			continue // no bound; a wrong wire type is proto.Unmarshal's to refuse
		}
		data, _ := protowire.ConsumeBytes(v)
		if f.list {
			c := &counts[f.slot]
			*c++
			if *c > f.max {
				return &BoundError{Field: f.name, Len: *c, Max: f.max, List: true}
			}
			if f.sub != nil {
				if err := scanMessage(data, f.sub); err != nil {
					return within(err, f.name+"["+strconv.Itoa(*c-1)+"]")
				}
			}
			continue
		}
		if f.sub != nil {
			if err := scanMessage(data, f.sub); err != nil {
				return within(err, f.name)
			}
			continue
		}
		if len(data) > f.max {
			return &BoundError{Field: f.name, Len: len(data), Max: f.max}
		}
	}
	return nil
}

// Refused is a flow DecodeBatch left out: its index in the message and
// the bound it breaks.
type Refused struct {
	Index int
	Err   *BoundError
}

// DecodeBatch decodes FlowBatch wire bytes as a receiver must: it counts
// the flows first (more than maxFlows: a *TooManyFlowsError, nothing
// decoded), then measures each flow against Bounds and decodes only those
// within them, all in one array, and validates them. A flow beyond a bound
// is left out and reported in refused (its neighbours are kept); a message
// that does not parse (ErrMalformed) or holds an invalid flow (ErrInvalid,
// naming it) is an error. What it allocates is bounded by maxFlows and the
// bounds, whatever the bytes.
func DecodeBatch(b []byte, maxFlows int) (flows []*flowv1.Flow, refused []Refused, err error) {
	n, err := CountFlows(b)
	if err != nil {
		return nil, nil, err
	}
	if n > maxFlows {
		return nil, nil, &TooManyFlowsError{N: n, Max: maxFlows}
	}
	var msgs []flowv1.Flow
	if n > 0 {
		msgs, flows = make([]flowv1.Flow, n), make([]*flowv1.Flow, 0, n)
	}
	i := 0
	for len(b) > 0 {
		num, typ, v, rest, _ := consumeField(b) // CountFlows checked the framing
		b = rest
		if num == batchFieldInstance && typ == protowire.BytesType {
			// A proto3 string: what is not UTF-8 (here, printable ASCII)
			// is a message proto.Unmarshal refuses.
			inst, _ := protowire.ConsumeBytes(v)
			if err := CheckAgentInstance(inst); err != nil {
				return nil, nil, malformed("FlowBatch", err)
			}
		}
		if num != 1 {
			continue // another field of FlowBatch
		}
		if typ != protowire.BytesType {
			return nil, nil, malformed("FlowBatch", fmt.Errorf("flows[%d] has wire type %d", i, typ))
		}
		data, _ := protowire.ConsumeBytes(v)
		if err := ScanFlow(data); err != nil {
			var be *BoundError
			if !errors.As(err, &be) {
				return nil, nil, fmt.Errorf("flows[%d]: %w", i, err)
			}
			refused = append(refused, Refused{Index: i, Err: be})
			i++
			continue
		}
		m := &msgs[len(flows)]
		if err := proto.Unmarshal(data, m); err != nil {
			return nil, nil, malformed(fmt.Sprintf("flows[%d]", i), err)
		}
		if err := Validate(m); err != nil {
			return nil, nil, fmt.Errorf("flows[%d]: %w", i, err)
		}
		flows = append(flows, m)
		i++
	}
	return flows, refused, nil
}

// DecodeFlow decodes one Flow's wire bytes (a Kafka record of one flow)
// as DecodeBatch does a batch's: a *BoundError before decoding when a
// field is beyond its bound, else the validated flow.
func DecodeFlow(b []byte) (*flowv1.Flow, error) {
	if err := ScanFlow(b); err != nil {
		return nil, err
	}
	f := new(flowv1.Flow)
	if err := proto.Unmarshal(b, f); err != nil {
		return nil, malformed("Flow", err)
	}
	if err := Validate(f); err != nil {
		return nil, err
	}
	return f, nil
}

// CountFlowsChunks is CountFlows of the concatenation of chunks (a
// message as it came off the network, in pieces), without joining them:
// a receiver refuses a message of too many flows without copying it.
func CountFlowsChunks(chunks [][]byte) (int, error) {
	c := chunkCursor{chunks: chunks}
	n := 0
	for !c.done() {
		tag, err := c.varint()
		if err != nil {
			return n, malformed("FlowBatch", err)
		}
		if tag>>3 < uint64(protowire.MinValidNumber) || tag>>3 > uint64(protowire.MaxValidNumber) {
			return n, malformed("FlowBatch", fmt.Errorf("field number %d", tag>>3))
		}
		var skip uint64
		switch protowire.Type(tag & 7) {
		case protowire.VarintType:
			if _, err := c.varint(); err != nil {
				return n, malformed("FlowBatch", err)
			}
		case protowire.Fixed32Type:
			skip = 4
		case protowire.Fixed64Type:
			skip = 8
		case protowire.BytesType:
			if skip, err = c.varint(); err != nil {
				return n, malformed("FlowBatch", err)
			}
		default:
			return n, malformed("FlowBatch", fmt.Errorf("wire type %d", tag&7))
		}
		if !c.skip(skip) {
			return n, malformed("FlowBatch", io.ErrUnexpectedEOF)
		}
		if tag>>3 == 1 {
			n++
		}
	}
	return n, nil
}

// chunkCursor reads across chunks.
type chunkCursor struct {
	chunks [][]byte
	i, off int // the next byte: chunks[i][off]
}

func (c *chunkCursor) done() bool {
	for c.i < len(c.chunks) && c.off >= len(c.chunks[c.i]) {
		c.i, c.off = c.i+1, 0
	}
	return c.i >= len(c.chunks)
}

func (c *chunkCursor) varint() (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 70; shift += 7 {
		if c.done() {
			return 0, io.ErrUnexpectedEOF
		}
		b := c.chunks[c.i][c.off]
		c.off++
		if shift == 63 && b > 1 {
			return 0, errors.New("varint overflows 64 bits")
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, errors.New("varint overflows 64 bits")
}

func (c *chunkCursor) skip(n uint64) bool {
	for n > 0 {
		if c.done() {
			return false
		}
		left := uint64(len(c.chunks[c.i]) - c.off)
		if n < left {
			c.off += int(n)
			return true
		}
		n -= left
		c.i, c.off = c.i+1, 0
	}
	return true
}

package flowpb

// Direct wire encoding: flow.Record → FlowBatch bytes, without building
// flowv1.Flow messages and without the reflective proto runtime, which
// dominated the agent's CPU per exported flow. The output is byte for byte
// what proto.Marshal produces for the FlowBatch of ToProto's messages
// (fields in field-number order, proto3 zero values omitted, minimal
// varints; wire_test.go checks it on random records), so consumers cannot
// tell the difference.
//
// One exception, on purpose: a string that is not valid UTF-8 (an interface
// or netns name is any bytes the kernel accepted) makes proto.Marshal fail
// and every proto3 decoder reject the message. AppendFlow instead replaces
// each run of invalid bytes with U+FFFD (strings.ToValidUTF8), so one odd
// name costs neither the flow nor its batch.

import (
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flowlens/flowlens/pkg/flow"
)

// AppendBatch appends the FlowBatch of batch to b, each flow stamped with
// the identity as ToProto does (agentIP in AddrBytes form).
func AppendBatch(b []byte, batch []flow.Record, nodeName string, agentIP []byte) []byte {
	for i := range batch {
		b = AppendFlow(b, &batch[i], nodeName, agentIP)
	}
	return b
}

// AppendFlow appends r as one element of FlowBatch.flows: field 1's tag,
// the Flow's length, the Flow. A FlowBatch is nothing but such elements, so
// any run of consecutive elements is a valid FlowBatch (a sender can split
// a batch at element boundaries).
func AppendFlow(b []byte, r *flow.Record, nodeName string, agentIP []byte) []byte {
	b, start := openMessage(b, 1, 2) // flows: most are 128 B to 16 KiB
	b = appendHead(b, r, nil)
	b = appendString(b, 29, nodeName)
	b = appendBytes(b, 30, agentIP)
	b = appendTail(b, r)
	return closeMessage(b, start, 2)
}

// Appender appends flows as AppendFlow does, for one agent, faster: the
// agent's identity is encoded once, and so is each interface, then copied
// (flow.InterfaceCache: a node's flows cross the same few interfaces over
// and over). Not safe for concurrent use.
type Appender struct {
	ident  []byte // node_name and agent_ip (fields 29, 30)
	ifaces *flow.InterfaceCache
}

// NewAppender returns an Appender of flows from the agent nodeName,
// agentIP (in AddrBytes form).
func NewAppender(nodeName string, agentIP []byte) *Appender {
	a := &Appender{ifaces: flow.NewInterfaceCache(appendInterface)}
	a.SetIdentity(nodeName, agentIP)
	return a
}

// SetIdentity changes the agent the flows are stamped with.
func (a *Appender) SetIdentity(nodeName string, agentIP []byte) {
	a.ident = appendBytes(appendString(a.ident[:0], 29, nodeName), 30, agentIP)
}

// Append is AppendFlow with the Appender's identity, byte for byte.
func (a *Appender) Append(b []byte, r *flow.Record) []byte {
	b, start := openMessage(b, 1, 2)
	b = appendHead(b, r, a.ifaces)
	b = append(b, a.ident...)
	b = appendTail(b, r)
	return closeMessage(b, start, 2)
}

// appendHead appends the Flow's fields before the identity (1 to 20), the
// interfaces from ifaces when not nil.
func appendHead(b []byte, r *flow.Record, ifaces *flow.InterfaceCache) []byte {
	b = appendAddrField(b, 1, r.SrcAddr)
	b = appendAddrField(b, 2, r.DstAddr)
	b = appendVarint(b, 3, uint64(r.SrcPort))
	b = appendVarint(b, 4, uint64(r.DstPort))
	b = appendVarint(b, 5, uint64(r.Proto))
	b = appendVarint(b, 6, uint64(r.IcmpType))
	b = appendVarint(b, 7, uint64(r.IcmpCode))
	b = appendVarint(b, 8, r.Bytes)
	b = appendVarint(b, 9, r.Packets)
	b = appendVarint(b, 10, uint64(r.TCPFlags))
	b = appendVarint(b, 11, uint64(r.EthType))
	b = appendVarint(b, 12, uint64(r.DSCP))
	b = appendMAC(b, 13, r.SrcMAC) // always 6 bytes, so always sent
	b = appendMAC(b, 14, r.DstMAC)
	b = appendTimestamp(b, 15, r.StartTime) // always sent, like ToProto's
	b = appendTimestamp(b, 16, r.EndTime)
	for i := range r.Interfaces {
		if ifaces != nil {
			b = append(b, ifaces.Get(&r.Interfaces[i])...)
		} else {
			b = appendInterface(b, &r.Interfaces[i])
		}
	}
	b = appendBool(b, 18, r.IfacesOverflow)
	b = appendVarint(b, 19, uint64(r.Sampling))
	return appendBool(b, 20, r.Partial)
}

// appendTail appends the Flow's fields after the identity: 31, then the
// feature groups (50 on), in groups' order, then the tunnel (60), 61 to 64. Each is called by name, not
// through groups: an indirect call per group and flow cost a sixth of the
// encoder's time.
func appendTail(b []byte, r *flow.Record) []byte {
	b = appendBool(b, 31, r.FragUnmatched)
	// groupgen wire: generated to its end line by make generate. DO NOT EDIT.
	b = appendDrops(b, r)
	b = appendRTT(b, r)
	b = appendRetransmits(b, r)
	b = appendXlat(b, r)
	b = appendTLS(b, r)
	b = appendDNS(b, r)
	b = appendTCP(b, r)
	// groupgen wire: end.
	b = appendTunnel(b, r) // 60, after the groups
	b = appendBool(b, 61, r.L4Unread)
	b = appendBool(b, 62, r.ExtUnread)
	b = appendString(b, 63, r.SrcDNSName)
	return appendString(b, 64, r.DstDNSName)
}

// appendInterface appends it as an element of Flow.interfaces (17).
func appendInterface(b []byte, it *flow.Interface) []byte {
	b, start := openMessage(b, 17, 1)
	b = appendString(b, 1, it.Name)
	b = appendVarint(b, 2, uint64(it.Ifindex))
	b = appendString(b, 3, it.Netns)
	b = appendVarint(b, 4, it.NetnsID)
	b = appendVarint(b, 5, uint64(it.Direction)) // enum: int32, never negative here
	return closeMessage(b, start, 1)
}

// openGroup and closeGroup are openMessage and closeMessage of a feature
// group's message, with a one-byte length guess, and for the usual body
// under 128 bytes no more than that byte to write.
func openGroup(b []byte, num protowire.Number) ([]byte, int) {
	b = append(appendTag(b, num, protowire.BytesType), 0)
	return b, len(b)
}

func closeGroup(b []byte, start int) []byte {
	if n := len(b) - start; n < 0x80 {
		b[start-1] = byte(n)
		return b
	}
	return closeMessage(b, start, 1)
}

// openMessage appends the tag of submessage field num and room for its
// length (guess bytes: the size of the varint expected), and returns where
// the submessage's body starts.
func openMessage(b []byte, num protowire.Number, guess int) ([]byte, int) {
	b = appendTag(b, num, protowire.BytesType)
	b = append(b, make([]byte, guess)...)
	return b, len(b)
}

// closeMessage writes the length of the body b[start:] into the guess bytes
// openMessage left before it, first moving the body when the length's
// varint has another size (a varint must be minimal to match proto.Marshal).
func closeMessage(b []byte, start, guess int) []byte {
	n := len(b) - start
	k := protowire.SizeVarint(uint64(n))
	if k != guess {
		if k > guess {
			b = append(b, make([]byte, k-guess)...)
		}
		copy(b[start-guess+k:], b[start:start+n])
		b = b[:start-guess+k+n]
	}
	// b has room: this writes the k bytes in place (one or two: a flow, an
	// interface, here without a call).
	switch k {
	case 1:
		b[start-guess] = byte(n)
	case 2:
		b[start-guess], b[start-guess+1] = byte(n)|0x80, byte(n>>7)
	default:
		protowire.AppendVarint(b[:start-guess], uint64(n))
	}
	return b
}

// appendTag is small enough to be inlined: with a constant field number
// the tag is a constant byte or two, no call to protowire.AppendVarint;
// appendVarint likewise writes a value below 128 itself.

// appendTag appends the tag of field num, which must be below 2048.
func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	t := uint64(num)<<3 | uint64(typ)
	if t < 0x80 {
		return append(b, byte(t))
	}
	return append(b, byte(t)|0x80, byte(t>>7))
}

// appendVarint appends field num unless v is 0 (proto3 omits zero values).
// The varint is written here, a byte per 7 bits, rather than by a call to
// protowire.AppendVarint, which was a fifth of AppendFlow's time.
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = appendTag(b, num, protowire.VarintType)
	for ; v >= 0x80; v >>= 7 {
		b = append(b, byte(v)|0x80)
	}
	return append(b, byte(v))
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return appendVarint(b, num, 1)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = appendTag(b, num, protowire.BytesType)
	return append(appendLen(b, len(v)), v...)
}

// appendMAC appends a MAC, 6 bytes (field num below 16: a one-byte tag).
func appendMAC(b []byte, num protowire.Number, m [6]byte) []byte {
	return append(b, byte(num)<<3|byte(protowire.BytesType), 6, m[0], m[1], m[2], m[3], m[4], m[5])
}

// appendLen appends a length-delimited field's length, inlined for the
// common one-byte length.
func appendLen(b []byte, n int) []byte {
	if n < 0x80 {
		return append(b, byte(n))
	}
	return protowire.AppendVarint(b, uint64(n))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	if !validUTF8(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	b = appendTag(b, num, protowire.BytesType)
	return append(appendLen(b, len(s)), s...)
}

// validUTF8 is utf8.ValidString with the short ASCII strings of flows
// (interface, namespace and node names) checked inline.
func validUTF8(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return utf8.ValidString(s[i:])
		}
	}
	return true
}

// appendAddrField appends a as bytes field num, in AddrBytes' form (4 or 16
// bytes; nothing for the zero Addr, as proto3 omits empty bytes).
func appendAddrField(b []byte, num protowire.Number, a netip.Addr) []byte {
	if !a.IsValid() {
		return b
	}
	b = appendTag(b, num, protowire.BytesType)
	b = append(b, byte(a.BitLen()/8))
	return appendAddr(b, a)
}

// appendTimestamp appends t as a google.protobuf.Timestamp (seconds = 1,
// nanos = 2) submessage field num, as setTimestamp fills it. Its body is
// at most 17 bytes: the length is one byte, known before the body.
func appendTimestamp(b []byte, num protowire.Number, t time.Time) []byte {
	secs := uint64(t.Unix())               // int64: negative is 10 bytes
	nanos := uint64(int64(t.Nanosecond())) // int32, in [0, 1e9)
	n := 0
	if secs != 0 {
		n += 1 + protowire.SizeVarint(secs)
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(nanos)
	}
	b = append(appendTag(b, num, protowire.BytesType), byte(n))
	b = appendVarint(b, 1, secs)
	return appendVarint(b, 2, nanos)
}

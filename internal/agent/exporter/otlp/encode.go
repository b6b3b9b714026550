package otlp

// Direct wire encoding of flows as an OTLP ExportLogsServiceRequest
// (opentelemetry/proto/collector/logs/v1), like pkg/flow/flowpb/wire.go does
// for our own FlowBatch: no generated messages, no reflection, reused
// buffers, so encoding a flow allocates nothing. The request is
//
//	ExportLogsServiceRequest { resource_logs = 1: ResourceLogs {
//	    resource = 1: Resource { attributes = 1 }
//	    scope_logs = 2: ScopeLogs { scope = 1, log_records = 2 ... } } }
//
// with one LogRecord per flow. Field numbers are those of
// opentelemetry-proto's logs.proto, common.proto and resource.proto; the
// attribute names are the mapping documented in docs/export.md (OTLP).

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flowlens/flowlens/pkg/flow"
)

// Field numbers (opentelemetry-proto v1).
const (
	fReqResourceLogs  = 1 // ExportLogsServiceRequest.resource_logs
	fRLResource       = 1 // ResourceLogs.resource
	fRLScopeLogs      = 2 // ResourceLogs.scope_logs
	fResAttributes    = 1 // Resource.attributes
	fSLScope          = 1 // ScopeLogs.scope
	fSLLogRecords     = 2 // ScopeLogs.log_records
	fScopeName        = 1 // InstrumentationScope.name
	fScopeVersion     = 2 // InstrumentationScope.version
	fLRTime           = 1 // LogRecord.time_unix_nano (fixed64)
	fLRAttributes     = 6 // LogRecord.attributes
	fLRObservedTime   = 11
	fLREventName      = 12
	fKVKey            = 1 // KeyValue.key
	fKVValue          = 2 // KeyValue.value (AnyValue)
	fAnyString        = 1 // AnyValue.string_value
	fAnyBool          = 2
	fAnyInt           = 3 // int64
	fAnyArray         = 5 // ArrayValue { values = 1 }
	fAnyKVList        = 6 // KeyValueList { values = 1 }
	fArrayValues      = 1
	fKVListValues     = 1
	fPartialSuccess   = 1 // ExportLogsServiceResponse.partial_success
	fPartialRejected  = 1 // ExportLogsPartialSuccess.rejected_log_records
	fPartialErrorText = 2 // ExportLogsPartialSuccess.error_message
)

// EventName is every flow LogRecord's event_name.
const EventName = "flowlens.flow"

// ScopeName is the InstrumentationScope of the flow records.
const ScopeName = "github.com/flowlens/flowlens/internal/agent/exporter/otlp"

// encoder builds requests into a reused buffer (reqBuf).
type encoder struct {
	// The constant starts of ResourceLogs' and ScopeLogs' bodies: the
	// Resource field (its attributes) and the InstrumentationScope field,
	// encoded once.
	resource, scope []byte
	// head is what every record of the request has after its time:
	// observed_time_unix_nano (the export's time) and event_name.
	head   []byte
	cur    *reqBuf // the request's buffer
	buf    []byte  // cur's bytes while it is built: headroom, then the records
	tmp    []byte  // an attribute's text (address, MAC) before it is written
	ifaces ifaceCache
}

// headroom is room left before the records for the request's headers (the
// resource and scope, and three tags with their lengths).
func (e *encoder) headroom() int {
	return len(e.resource) + len(e.scope) + 3*(1+binary.MaxVarintLen64)
}

// newEncoder encodes the resource attributes and the scope once.
func newEncoder(nodeName, version string) *encoder {
	var res []byte
	res = kvString(res, fResAttributes, kServiceName, "flowlens-agent")
	if version != "" {
		res = kvString(res, fResAttributes, kServiceVersion, version)
	}
	res = kvString(res, fResAttributes, kHostName, nodeName)
	res = kvString(res, fResAttributes, kK8sNodeName, nodeName)
	var sc []byte
	sc = appendString(sc, fScopeName, ScopeName)
	sc = appendString(sc, fScopeVersion, version)
	e := &encoder{tmp: make([]byte, 0, 64), ifaces: newIfaceCache()}
	e.resource = protowire.AppendBytes(protowire.AppendTag(nil, fRLResource, protowire.BytesType), res)
	e.scope = protowire.AppendBytes(protowire.AppendTag(nil, fSLScope, protowire.BytesType), sc)
	return e
}

// begin starts a request whose records were observed (exported) at
// observed: the records are appended after the headroom.
func (e *encoder) begin(observed uint64) {
	e.head = appendFixed64(e.head[:0], fLRObservedTime, observed)
	e.head = appendString(e.head, fLREventName, EventName)
	n := e.headroom()
	if e.cur == nil || e.cur.held.Load() != 0 {
		// gRPC still holds the last request (sent when its call timed
		// out): it is gRPC's now, freed once gRPC lets it go.
		e.cur = &reqBuf{b: make([]byte, n, n+64<<10)}
	}
	e.buf = e.cur.b[:n]
}

// size is the size of the records appended so far.
func (e *encoder) size() int { return len(e.buf) - e.headroom() }

// finish writes the headers in front of the records and returns the
// buffer, the whole request in its req (valid until the next begin).
func (e *encoder) finish() *reqBuf {
	h := e.headroom()
	records := len(e.buf) - h
	slBody := len(e.scope) + records
	rlBody := len(e.resource) + sizeField(slBody)
	// Written backwards from the records: ScopeLogs' scope, ScopeLogs'
	// tag and length, Resource, ResourceLogs' tag and length.
	at := h - len(e.scope)
	copy(e.buf[at:], e.scope)
	at = putHeader(e.buf, at, fRLScopeLogs, slBody)
	at -= len(e.resource)
	copy(e.buf[at:], e.resource)
	at = putHeader(e.buf, at, fReqResourceLogs, rlBody)
	e.cur.b, e.cur.req = e.buf, e.buf[at:]
	return e.cur
}

// sizeField is the size of a length-delimited field of a one-byte tag.
func sizeField(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// putHeader writes a one-byte tag and the length n just before b[at] and
// returns where they start.
func putHeader(b []byte, at int, num protowire.Number, n int) int {
	k := protowire.SizeVarint(uint64(n))
	at -= 1 + k
	b[at] = byte(num)<<3 | byte(protowire.BytesType)
	protowire.AppendVarint(b[at+1:at+1], uint64(n))
	return at
}

// appendFlow appends r as one LogRecord of ScopeLogs.log_records.
func (e *encoder) appendFlow(r *flow.Record) {
	b, start := openMessage(e.buf, fSLLogRecords, 2) // most records are 128 B to 16 KiB
	b = appendFixed64(b, fLRTime, unixNano(r.StartTime))
	e.buf = append(b, e.head...)
	e.attributes(r)
	e.buf = closeMessage(e.buf, start, 2)
}

// attributes appends r's attributes (docs/export.md has the table): the
// core fields', then each feature group's (groups). A boolean is sent only
// when true (absent is false, as in our protobuf): flags are rarely set,
// and each one sent costs some 20 bytes per flow.
func (e *encoder) attributes(r *flow.Record) {
	const a = fLRAttributes
	b := e.buf
	b = e.kvAddr(b, kSourceAddress, r.SrcAddr)
	b = kvInt(b, a, kSourcePort, int64(r.SrcPort))
	b = e.kvAddr(b, kDestinationAddress, r.DstAddr)
	b = kvInt(b, a, kDestinationPort, int64(r.DstPort))
	if t := transportName(r.Proto); t != "" {
		b = kvText(b, a, kNetworkTransport, t)
	}
	if r.SrcAddr.Is4() {
		b = kvText(b, a, kNetworkType, "ipv4")
	} else if r.SrcAddr.Is6() {
		b = kvText(b, a, kNetworkType, "ipv6")
	}
	if len(r.Interfaces) > 0 {
		b = e.ifaces.appendFirst(b, &r.Interfaces[0])
	}
	b = kvInt(b, a, kFlowlensProto, int64(r.Proto))
	if r.Proto == 1 || r.Proto == 58 {
		b = kvInt(b, a, kFlowlensICMPType, int64(r.IcmpType))
		b = kvInt(b, a, kFlowlensICMPCode, int64(r.IcmpCode))
	}
	b = kvInt(b, a, kFlowlensBytes, int64(r.Bytes))
	b = kvInt(b, a, kFlowlensPackets, int64(r.Packets))
	b = kvInt(b, a, kFlowlensTCPFlags, int64(r.TCPFlags))
	b = kvInt(b, a, kFlowlensEthType, int64(r.EthType))
	b = kvInt(b, a, kFlowlensDSCP, int64(r.DSCP))
	b = kvMAC(b, kFlowlensSrcMAC, r.SrcMAC)
	b = kvMAC(b, kFlowlensDstMAC, r.DstMAC)
	b = kvInt(b, a, kFlowlensEndTimeUnixNano, int64(unixNano(r.EndTime)))
	b = e.ifaces.appendList(b, r.Interfaces)
	if r.IfacesOverflow {
		b = kvBool(b, a, kFlowlensInterfacesOverflow, true)
	}
	if r.FragUnmatched {
		b = kvBool(b, a, kFlowlensFragUnmatched, true)
	}
	b = tunnelAttributes(e, b, r)
	if r.L4Unread {
		b = kvBool(b, a, kFlowlensL4Unread, true)
	}
	if r.ExtUnread {
		b = kvBool(b, a, kFlowlensExtUnread, true)
	}
	b = dnsNameAttributes(b, r)
	b = kvInt(b, a, kFlowlensSampling, int64(r.Sampling))
	if r.Partial {
		b = kvBool(b, a, kFlowlensPartial, true)
	}
	// The feature groups in groups' order, each called by name rather than
	// through groups: an indirect call per group and flow costs some 15 ns
	// per flow.
	// groupgen attributes: generated to its end line by make generate. DO NOT EDIT.
	b = dropsAttributes(e, b, r)
	b = rttAttributes(e, b, r)
	b = retransmitsAttributes(e, b, r)
	b = xlatAttributes(e, b, r)
	b = tlsAttributes(e, b, r)
	b = dnsAttributes(e, b, r)
	b = tcpAttributes(e, b, r)
	// groupgen attributes: end.
	e.buf = b
}

// The attribute keys of the core fields, in wire form (attrKey), as
// docs/export.md maps them; each feature group's are in its file.
var (
	kSourceAddress              = newKey("source.address")
	kSourcePort                 = newKey("source.port")
	kDestinationAddress         = newKey("destination.address")
	kDestinationPort            = newKey("destination.port")
	kNetworkTransport           = newKey("network.transport")
	kNetworkType                = newKey("network.type")
	kNetworkInterfaceName       = newKey("network.interface.name")
	kNetworkIODirection         = newKey("network.io.direction")
	kFlowlensProto              = newKey("flowlens.proto")
	kFlowlensICMPType           = newKey("flowlens.icmp_type")
	kFlowlensICMPCode           = newKey("flowlens.icmp_code")
	kFlowlensBytes              = newKey("flowlens.bytes")
	kFlowlensPackets            = newKey("flowlens.packets")
	kFlowlensTCPFlags           = newKey("flowlens.tcp_flags")
	kFlowlensEthType            = newKey("flowlens.eth_type")
	kFlowlensDSCP               = newKey("flowlens.dscp")
	kFlowlensSrcMAC             = newKey("flowlens.src_mac")
	kFlowlensDstMAC             = newKey("flowlens.dst_mac")
	kFlowlensEndTimeUnixNano    = newKey("flowlens.end_time_unix_nano")
	kFlowlensInterfacesOverflow = newKey("flowlens.interfaces_overflow")
	kFlowlensFragUnmatched      = newKey("flowlens.frag_unmatched")
	kFlowlensL4Unread           = newKey("flowlens.l4_unread")
	kFlowlensExtUnread          = newKey("flowlens.ext_unread")
	kFlowlensSampling           = newKey("flowlens.sampling")
	kFlowlensPartial            = newKey("flowlens.partial")
	kFlowlensInterfaces         = newKey("flowlens.interfaces")
	kName                       = newKey("name")
	kIfindex                    = newKey("ifindex")
	kNetns                      = newKey("netns")
	kDirection                  = newKey("direction")
	kServiceName                = newKey("service.name")
	kServiceVersion             = newKey("service.version")
	kHostName                   = newKey("host.name")
	kK8sNodeName                = newKey("k8s.node.name")
)

// transportName is network.transport for an IP protocol number: the
// semantic conventions' values (tcp, udp), and the protocol's IANA keyword
// in lower case for the others they do not list; "" for the rest
// (flowlens.proto has the number).
func transportName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 1:
		return "icmp"
	case 58:
		return "ipv6-icmp"
	case 132:
		return "sctp"
	}
	return ""
}

// kvAddr appends an address attribute as text, IPv4-mapped IPv6 as IPv4
// (the JSON output's form); nothing for the zero Addr.
func (e *encoder) kvAddr(b []byte, key attrKey, a netip.Addr) []byte {
	if !a.IsValid() {
		return b
	}
	e.tmp = a.Unmap().AppendTo(e.tmp[:0])
	return kvBytes(b, fLRAttributes, key, e.tmp)
}

// kvMAC appends a MAC attribute as "aa:bb:cc:dd:ee:ff" (17 bytes).
func kvMAC(b []byte, key attrKey, m [6]byte) []byte {
	const hex = "0123456789abcdef"
	b = appendKey(b, fLRAttributes, key, 2+17)
	return append(b, byte(fAnyString<<3|protowire.BytesType), 17,
		hex[m[0]>>4], hex[m[0]&15], ':', hex[m[1]>>4], hex[m[1]&15], ':', hex[m[2]>>4], hex[m[2]&15], ':',
		hex[m[3]>>4], hex[m[3]&15], ':', hex[m[4]>>4], hex[m[4]&15], ':', hex[m[5]>>4], hex[m[5]&15])
}

func appendHex16(b []byte, v uint16) []byte {
	const hex = "0123456789abcdef"
	return append(b, '0', 'x', hex[v>>12], hex[v>>8&15], hex[v>>4&15], hex[v&15])
}

// attrKey is an attribute's key in wire form: KeyValue.key (tag, length,
// bytes) and the tag of KeyValue.value, which follows it. Built once per
// key, it is one copy per attribute.
type attrKey string

func newKey(k string) attrKey {
	b := appendTag(nil, fKVKey, protowire.BytesType)
	b = protowire.AppendString(b, k)
	return attrKey(appendTag(b, fKVValue, protowire.BytesType))
}

// The key-value appenders write KeyValue field num with its sizes computed
// up front (no length to patch afterwards).

// appendKey appends field num's tag (num < 16: every KeyValue field here
// has a one-byte tag), the KeyValue's length (its key and an AnyValue of
// vlen bytes), the key and the value's tag and length. Short enough to be
// inlined for the common case, a KeyValue under 128 bytes.
func appendKey(b []byte, num protowire.Number, k attrKey, vlen int) []byte {
	if n := len(k) + 1 + vlen; n < 0x80 {
		b = append(b, byte(num)<<3|byte(protowire.BytesType), byte(n))
		b = append(b, k...)
		return append(b, byte(vlen))
	}
	return appendLongKey(b, num, k, vlen)
}

func appendLongKey(b []byte, num protowire.Number, k attrKey, vlen int) []byte {
	b = appendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(k)+protowire.SizeVarint(uint64(vlen))+vlen))
	b = append(b, k...)
	return protowire.AppendVarint(b, uint64(vlen))
}

func kvString(b []byte, num protowire.Number, k attrKey, v string) []byte {
	if !utf8.ValidString(v) {
		// proto3 strings must be UTF-8, and receivers reject a request
		// holding one that is not: an odd interface name or netns name
		// (any bytes the kernel accepted) must not cost the batch.
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	b = appendKey(b, num, k, sizeField(len(v)))
	b = appendTag(b, fAnyString, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// kvText is kvString of a value known to be UTF-8: a constant, or a name
// from one of our tables.
func kvText(b []byte, num protowire.Number, k attrKey, v string) []byte {
	b = appendKey(b, num, k, sizeField(len(v)))
	b = appendTag(b, fAnyString, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// kvBytes is kvString of a value already valid UTF-8 (ASCII text).
func kvBytes(b []byte, num protowire.Number, k attrKey, v []byte) []byte {
	b = appendKey(b, num, k, sizeField(len(v)))
	b = appendTag(b, fAnyString, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// kvInt appends an int_value attribute. An AnyValue is a oneof: its zero
// is still written (0 is a value, not an absent field).
func kvInt(b []byte, num protowire.Number, k attrKey, v int64) []byte {
	if u := uint64(v); u < 0x80 {
		return append(appendKey(b, num, k, 2), byte(fAnyInt<<3|protowire.VarintType), byte(u))
	}
	u := uint64(v)
	b = appendKey(b, num, k, 1+protowire.SizeVarint(u))
	b = append(b, byte(fAnyInt<<3|protowire.VarintType))
	for ; u >= 0x80; u >>= 7 { // the varint, here rather than a call
		b = append(b, byte(u)|0x80)
	}
	return append(b, byte(u))
}

func kvBool(b []byte, num protowire.Number, k attrKey, v bool) []byte {
	return append(appendKey(b, num, k, 2), byte(fAnyBool<<3|protowire.VarintType), byte(protowire.EncodeBool(v)))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = appendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	b = appendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

// appendTag appends the tag of field num (below 2048); inlined, with a
// constant num it is a constant byte or two.
func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	t := uint64(num)<<3 | uint64(typ)
	if t < 0x80 {
		return append(b, byte(t))
	}
	return append(b, byte(t)|0x80, byte(t>>7))
}

// openMessage appends the tag of submessage field num and guess bytes for
// its length, and returns where the body starts; closeMessage writes the
// length, moving the body when its varint is not guess bytes long.
func openMessage(b []byte, num protowire.Number, guess int) ([]byte, int) {
	b = appendTag(b, num, protowire.BytesType)
	for range guess {
		b = append(b, 0)
	}
	return b, len(b)
}

func closeMessage(b []byte, start, guess int) []byte {
	n := len(b) - start
	k := protowire.SizeVarint(uint64(n))
	if k != guess {
		for range k - guess {
			b = append(b, 0)
		}
		copy(b[start-guess+k:], b[start:start+n])
		b = b[:start-guess+k+n]
	}
	protowire.AppendVarint(b[:start-guess], uint64(n))
	return b
}

// unixNano is t in nanoseconds since the epoch; 0 for the zero Time.
func unixNano(t time.Time) uint64 {
	if t.IsZero() || t.Unix() < 0 {
		return 0
	}
	return uint64(t.UnixNano())
}

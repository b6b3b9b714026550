// Package flowpb converts between the agent's flow.Record and the gRPC
// API's flowv1.Flow, both ways, so that the agent's exporter and any
// collector share one mapping (and a collector can print a received flow
// with flow.Record.AppendJSON, byte for byte what the agent would print).
//
// Record → Flow (Encoder, ToProto) reuses the destination message and its
// sub-messages and byte slices, so an exporter that keeps its messages
// between batches converts without allocating per flow. Flow → Record
// (ToRecord, ToRecords) validates the message first: a collector must not
// trust what arrives on the wire.
//
// AppendFlow and AppendBatch (wire.go) skip the messages altogether: they
// encode Records straight into FlowBatch wire bytes, for the exporter.
//
// Each feature group of a Record (pkg/flow's Groups) is a message field of
// Flow named after the feature; its conversions, validation and wire
// encoding live in the file named after the feature (dns.go ...), listed
// in groups (zz_generated.groups.go) and called by name in wire.go, both
// generated from the feature registry (groupgen). GroupField finds a
// feature's field by name.
package flowpb

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Identity is the agent identity stamped on every flow it sends.
type Identity struct {
	NodeName string
	AgentIP  netip.Addr // zero: unknown (sent as empty bytes)
}

// ToProto fills dst from r, reusing dst's byte slices, timestamps and
// interface and group messages. A feature group r does not carry leaves its
// message unset (nil). agentIP is the identity's address in wire form (see
// AddrBytes); it is shared, not copied: callers must not modify it.
func ToProto(dst *flowv1.Flow, r *flow.Record, nodeName string, agentIP []byte) {
	toProto(dst, nil, r, nodeName, agentIP)
}

// toProto is ToProto parking the group messages it unsets in spare (when
// not nil), for the next record that has the group.
func toProto(dst, spare *flowv1.Flow, r *flow.Record, nodeName string, agentIP []byte) {
	dst.SrcAddr = appendAddr(dst.SrcAddr[:0], r.SrcAddr)
	dst.DstAddr = appendAddr(dst.DstAddr[:0], r.DstAddr)
	dst.SrcPort = uint32(r.SrcPort)
	dst.DstPort = uint32(r.DstPort)
	dst.Proto = uint32(r.Proto)
	dst.IcmpType = uint32(r.IcmpType)
	dst.IcmpCode = uint32(r.IcmpCode)
	dst.Bytes = r.Bytes
	dst.Packets = r.Packets
	dst.TcpFlags = uint32(r.TCPFlags)
	dst.EthType = uint32(r.EthType)
	dst.Dscp = uint32(r.DSCP)
	dst.SrcMac = append(dst.SrcMac[:0], r.SrcMAC[:]...)
	dst.DstMac = append(dst.DstMac[:0], r.DstMAC[:]...)
	dst.StartTime = setTimestamp(dst.StartTime, r.StartTime)
	dst.EndTime = setTimestamp(dst.EndTime, r.EndTime)

	ifs := dst.Interfaces[:cap(dst.Interfaces)]
	if len(ifs) < len(r.Interfaces) {
		grown := make([]*flowv1.Interface, len(r.Interfaces))
		copy(grown, ifs)
		ifs = grown
	}
	for i := range r.Interfaces {
		it := &r.Interfaces[i]
		p := ifs[i]
		if p == nil {
			p = &flowv1.Interface{}
			ifs[i] = p
		}
		p.Name = it.Name
		p.Ifindex = it.Ifindex
		p.Netns = it.Netns
		p.NetnsId = it.NetnsID
		p.Direction = flowv1.Direction(it.Direction)
	}
	dst.Interfaces = ifs[:len(r.Interfaces)]
	dst.InterfacesOverflow = r.IfacesOverflow
	dst.FragUnmatched = r.FragUnmatched
	dst.L4Unread = r.L4Unread
	dst.ExtUnread = r.ExtUnread

	dst.Sampling = r.Sampling
	dst.Partial = r.Partial
	for i := range groups {
		groups[i].toProto(dst, spare, r)
	}
	tunnelToProto(dst, spare, r)
	dst.SrcDnsName, dst.DstDnsName = r.SrcDNSName, r.DstDNSName

	dst.NodeName = nodeName
	dst.AgentIp = agentIP
}

// AddrBytes is an address in wire form: 4 bytes for IPv4, 16 for IPv6,
// none for the zero Addr.
func AddrBytes(a netip.Addr) []byte { return appendAddr(nil, a) }

func appendAddr(b []byte, a netip.Addr) []byte {
	switch {
	case a.Is4():
		v := a.As4()
		return append(b, v[:]...)
	case a.Is6():
		v := a.As16()
		return append(b, v[:]...)
	}
	return b
}

func setTimestamp(ts *timestamppb.Timestamp, t time.Time) *timestamppb.Timestamp {
	if ts == nil {
		ts = &timestamppb.Timestamp{}
	}
	ts.Seconds = t.Unix()
	ts.Nanos = int32(t.Nanosecond())
	return ts
}

// Encoder converts batches of Records into messages it owns and reuses: the
// messages returned by Encode are valid until the next call. Once the
// encoder has seen its largest batch, encoding allocates nothing. Not safe
// for concurrent use.
type Encoder struct {
	nodeName string
	agentIP  []byte
	pool     []*flowv1.Flow
	// spare[i] keeps the group messages pool[i] had for a record with the
	// group and then lost to a record without (ToProto leaves them unset).
	spare []flowv1.Flow
}

// NewEncoder returns an Encoder stamping id on every flow.
func NewEncoder(id Identity) *Encoder {
	return &Encoder{nodeName: id.NodeName, agentIP: AddrBytes(id.AgentIP)}
}

// SetIdentity changes the identity stamped on the flows of later batches.
func (e *Encoder) SetIdentity(id Identity) {
	e.nodeName, e.agentIP = id.NodeName, AddrBytes(id.AgentIP)
}

// Encode converts batch. The result and its messages belong to the Encoder.
func (e *Encoder) Encode(batch []flow.Record) []*flowv1.Flow {
	if len(e.pool) < len(batch) {
		grown := make([]*flowv1.Flow, len(batch))
		copy(grown, e.pool)
		// One array for the new messages, not one allocation each.
		fresh := make([]flowv1.Flow, len(batch)-len(e.pool))
		for i := range fresh {
			grown[len(e.pool)+i] = &fresh[i]
		}
		e.pool = grown
		e.spare = append(e.spare, make([]flowv1.Flow, len(batch)-len(e.spare))...)
	}
	out := e.pool[:len(batch)]
	for i := range batch {
		toProto(out[i], &e.spare[i], &batch[i], e.nodeName, e.agentIP)
	}
	return out
}

// Trim lets go of pooled messages beyond the first n (after an unusually
// large batch, say).
func (e *Encoder) Trim(n int) {
	if n < len(e.pool) {
		clear(e.pool[n:])
		e.pool = e.pool[:n:n]
		e.spare = e.spare[:n:n]
	}
}

// ErrInvalid wraps every validation error.
var ErrInvalid = errors.New("invalid flow")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Validate checks that f can be represented as a flow.Record: address
// and MAC lengths, integer ranges of the narrower Record fields,
// timestamps, interface count and directions, and each feature group's
// own (translated addresses, TLS and DNS values, durations within a
// time.Duration); and that its strings and lists are within Bounds (a
// *BoundError), as ScanFlow checks on the wire.
func Validate(f *flowv1.Flow) error {
	if f == nil {
		return invalid("nil flow")
	}
	if err := checkBounds(f); err != nil {
		return err
	}
	for _, a := range []struct {
		name string
		b    []byte
	}{{"src_addr", f.SrcAddr}, {"dst_addr", f.DstAddr}, {"agent_ip", f.AgentIp}} {
		if err := checkAddr(a.name, a.b); err != nil {
			return err
		}
	}
	for _, m := range []struct {
		name string
		b    []byte
	}{{"src_mac", f.SrcMac}, {"dst_mac", f.DstMac}} {
		if n := len(m.b); n != 0 && n != 6 {
			return invalid("%s has %d bytes, want 6", m.name, n)
		}
	}
	for _, v := range []struct {
		name string
		v    uint32
		max  uint32
	}{
		{"src_port", f.SrcPort, 0xffff}, {"dst_port", f.DstPort, 0xffff},
		{"proto", f.Proto, 0xff}, {"icmp_type", f.IcmpType, 0xff}, {"icmp_code", f.IcmpCode, 0xff},
		{"tcp_flags", f.TcpFlags, 0xffff}, {"eth_type", f.EthType, 0xffff}, {"dscp", f.Dscp, 63},
	} {
		if err := checkMax(v.name, v.v, v.max); err != nil {
			return err
		}
	}
	for i := range groups {
		if err := groups[i].validate(f); err != nil {
			return err
		}
	}
	if err := validateTunnel(f); err != nil {
		return err
	}
	for _, t := range []struct {
		name string
		ts   *timestamppb.Timestamp
	}{{"start_time", f.StartTime}, {"end_time", f.EndTime}} {
		if t.ts != nil {
			if err := t.ts.CheckValid(); err != nil {
				return invalid("%s: %v", t.name, err)
			}
		}
	}
	for i, it := range f.Interfaces {
		if it == nil {
			return invalid("interfaces[%d] is null", i)
		}
		if it.Direction < flowv1.Direction_DIRECTION_UNSPECIFIED || it.Direction > flowv1.Direction_DIRECTION_BOTH {
			return invalid("interfaces[%d].direction = %d", i, it.Direction)
		}
	}
	return nil
}

// checkBounds is ScanFlow's check on a decoded flow (the address and MAC
// lengths are Validate's own, exact, checks).
func checkBounds(f *flowv1.Flow) error {
	str := func(name string, s string, max int) error {
		if len(s) > max {
			return &BoundError{Field: name, Len: len(s), Max: max}
		}
		return nil
	}
	if err := firstErr(str("node_name", f.NodeName, flow.MaxNodeName), str("src_dns_name", f.SrcDnsName, flow.MaxDNSName),
		str("dst_dns_name", f.DstDnsName, flow.MaxDNSName)); err != nil {
		return err
	}
	if n := len(f.Interfaces); n > flow.MaxInterfaces {
		return &BoundError{Field: "interfaces", Len: n, Max: flow.MaxInterfaces, List: true}
	}
	for i, it := range f.Interfaces {
		if err := firstErr(str("name", it.GetName(), flow.MaxInterfaceName), str("netns", it.GetNetns(), flow.MaxNetnsName)); err != nil {
			return within(err, "interfaces["+strconv.Itoa(i)+"]")
		}
	}
	if d := f.Drops; d != nil {
		if err := firstErr(str("drop_cause", d.DropCause, flow.MaxDropCause), str("drop_tcp_state", d.DropTcpState, flow.MaxDropTCPState)); err != nil {
			return within(err, "drops")
		}
	}
	if d := f.Dns; d != nil {
		if err := str("dns_name", d.DnsName, flow.MaxDNSName); err != nil {
			return within(err, "dns")
		}
	}
	return nil
}

// ToRecord validates f and fills dst. dst.Interfaces reuses its backing
// array when it has room.
func ToRecord(dst *flow.Record, f *flowv1.Flow) error {
	if err := Validate(f); err != nil {
		return err
	}
	ifs := dst.Interfaces[:0]
	*dst = flow.Record{}
	toRecord(dst, f, ifs)
	return nil
}

// ToRecords validates and converts flows, appending to dst. All records'
// Interfaces share one backing array (two allocations per call, not one per
// flow). On error dst is returned as it was, with the index of the bad flow.
func ToRecords(dst []flow.Record, flows []*flowv1.Flow) ([]flow.Record, error) {
	n := 0
	for i, f := range flows {
		if err := Validate(f); err != nil {
			return dst, fmt.Errorf("flows[%d]: %w", i, err)
		}
		n += len(f.Interfaces)
	}
	ifs := make([]flow.Interface, 0, n)
	start := len(dst)
	dst = append(dst, make([]flow.Record, len(flows))...)
	for i, f := range flows {
		r := &dst[start+i]
		ifs = toRecord(r, f, ifs)
	}
	return dst, nil
}

// toRecord fills r (zeroed) from a validated f; r.Interfaces is carved
// from ifs, which it returns grown.
func toRecord(r *flow.Record, f *flowv1.Flow, ifs []flow.Interface) []flow.Interface {
	r.SrcAddr = addrFrom(f.SrcAddr)
	r.DstAddr = addrFrom(f.DstAddr)
	r.SrcPort = uint16(f.SrcPort)
	r.DstPort = uint16(f.DstPort)
	r.Proto = uint8(f.Proto)
	r.IcmpType = uint8(f.IcmpType)
	r.IcmpCode = uint8(f.IcmpCode)
	r.Bytes = f.Bytes
	r.Packets = f.Packets
	r.TCPFlags = uint16(f.TcpFlags)
	r.EthType = uint16(f.EthType)
	r.DSCP = uint8(f.Dscp)
	copy(r.SrcMAC[:], f.SrcMac)
	copy(r.DstMAC[:], f.DstMac)
	r.StartTime = timeFrom(f.StartTime)
	r.EndTime = timeFrom(f.EndTime)
	start := len(ifs)
	for _, it := range f.Interfaces {
		ifs = append(ifs, flow.Interface{Name: it.Name, Ifindex: it.Ifindex, Netns: it.Netns,
			NetnsID: it.NetnsId, Direction: flow.Direction(it.Direction)})
	}
	if len(ifs) > start {
		r.Interfaces = ifs[start:len(ifs):len(ifs)]
	}
	r.IfacesOverflow = f.InterfacesOverflow
	r.FragUnmatched = f.FragUnmatched
	r.L4Unread = f.L4Unread
	r.ExtUnread = f.ExtUnread
	r.Sampling = f.Sampling
	r.Partial = f.Partial
	for i := range groups {
		groups[i].toRecord(r, f)
	}
	tunnelToRecord(r, f)
	r.SrcDNSName, r.DstDNSName = f.SrcDnsName, f.DstDnsName
	return ifs
}

// Addr converts a wire address (0, 4 or 16 bytes) to a netip.Addr; any
// other length gives the zero Addr.
func Addr(b []byte) netip.Addr { return addrFrom(b) }

func addrFrom(b []byte) netip.Addr {
	switch len(b) {
	case 4:
		return netip.AddrFrom4([4]byte(b))
	case 16:
		return netip.AddrFrom16([16]byte(b))
	}
	return netip.Addr{}
}

func timeFrom(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return time.Unix(ts.Seconds, int64(ts.Nanos)).UTC()
}

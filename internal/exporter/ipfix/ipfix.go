// Package ipfix exports flows as IPFIX (RFC 7011) messages over UDP or TCP,
// to any IPFIX collector (nfdump, goflow2, Elastiflow, ntopng, Wireshark).
//
// Each message carries as many flows as fit in MaxMessageBytes (1400 bytes by
// default, under a 1500-byte path MTU with room for IP and UDP headers),
// never one message per flow. Templates of standard IANA Information
// Elements describe the records: one for IPv4 flows (TemplateIPv4), one for
// IPv6 flows (TemplateIPv6), and for flows the xlat feature saw translated
// the same with the post-NAT addresses and ports added (TemplateIPv4NAT,
// TemplateIPv6NAT), so untranslated flows keep the small records. Flows
// with enrichment (drops, RTT, retransmits, partial, sampling; Enriched) use
// the templates 260 to 263, the same plus flowlens's enterprise-specific
// elements under EnterpriseNumber (see docs/export.md). Over UDP the
// templates are sent in the first message and again every TemplateRefresh,
// so a collector that restarts can decode again within that interval; over
// TCP they are sent once at the start of each connection.
//
// The encoding is hand-written with encoding/binary into one reused buffer:
// no allocation per flow in steady state.
package ipfix

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowlens/flowlens/pkg/flow"
)

// Defaults of Config.
const (
	DefaultTransport       = "udp"
	DefaultDomainID        = 1
	DefaultTemplateRefresh = time.Minute
	DefaultMaxMessageBytes = 1400
	DefaultDialTimeout     = 10 * time.Second
)

// Template ids of the data sets: 256 + the record's variant (variantV6,
// variantNAT, variantEnriched bits).
const (
	TemplateIPv4            uint16 = 256
	TemplateIPv6            uint16 = 257
	TemplateIPv4NAT         uint16 = 258
	TemplateIPv6NAT         uint16 = 259
	TemplateIPv4Enriched    uint16 = 260
	TemplateIPv6Enriched    uint16 = 261
	TemplateIPv4NATEnriched uint16 = 262
	TemplateIPv6NATEnriched uint16 = 263
)

// A record's variant picks its template: bits of the address family and of
// the optional field groups.
const (
	variantV6       = 1
	variantNAT      = 2
	variantEnriched = 4
	variants        = 8
)

// EnterpriseNumber is the Private Enterprise Number (IANA) of flowlens's
// enterprise-specific Information Elements. 32473 is the PEN IANA reserves
// for documentation and examples (RFC 5612): a placeholder until flowlens
// registers its own, which will then replace it (collectors that map these
// elements by PEN must follow).
const EnterpriseNumber uint32 = 32473

// flowlens's enterprise-specific Information Elements (under
// EnterpriseNumber; sent with the enterprise bit 0x8000 set). Their ids
// start at 1001, away from the IANA ids in use, so a collector that ignores
// the enterprise number (a bug, but seen) does not take them for standard
// elements (1001 for octetDeltaCount's 1).
const (
	ieFlDropPackets    = 1001 // unsigned64
	ieFlDropBytes      = 1002 // unsigned64
	ieFlDropCause      = 1003 // string, variable length
	ieFlRTTNanoseconds = 1004 // unsigned64
	ieFlRetransmits    = 1005 // unsigned64
	ieFlSampling       = 1006 // unsigned32
	ieFlPartial        = 1007 // boolean (1 true, 2 false)
	ieFlInterfaces     = 1008 // unsigned8
	enterpriseBit      = 0x8000
	variableLength     = 0xffff
	// MaxDropCause bounds the drop cause sent (bytes): it keeps the
	// one-byte length prefix and a record well inside the smallest message.
	MaxDropCause = 200
)

const (
	version       = 10
	headerLen     = 16
	setHeaderLen  = 4
	templateSetID = 2
	ethHeaderLen  = 14 // destination and source MAC, ethernet type
	minMessage    = 512
	maxMessage    = 65535
)

// Information Element ids (IANA "IPFIX Information Elements").
const (
	ieOctetDeltaCount        = 1
	iePacketDeltaCount       = 2
	ieProtocolIdentifier     = 4
	ieIPClassOfService       = 5
	ieTCPControlBits         = 6
	ieSourceTransportPort    = 7
	ieSourceIPv4Address      = 8
	ieDestinationTransport   = 11
	ieDestinationIPv4Address = 12
	ieSourceIPv6Address      = 27
	ieDestinationIPv6Address = 28
	ieICMPTypeCodeIPv4       = 32
	ieSourceMacAddress       = 56
	ieFlowDirection          = 61
	ieDestinationMacAddress  = 80
	ieICMPTypeCodeIPv6       = 139
	ieFlowStartMilliseconds  = 152
	ieFlowEndMilliseconds    = 153
	ieEthernetType           = 256
	iePostNATSourceIPv4      = 225
	iePostNATDestinationIPv4 = 226
	iePostNAPTSourcePort     = 227
	iePostNAPTDestPort       = 228
	iePostNATSourceIPv6      = 281
	iePostNATDestinationIPv6 = 282
	ieLayer2OctetDeltaCount  = 352
)

type field struct {
	id, length uint16
	pen        uint32 // 0: an IANA element
}

// templateFields returns the template of one variant, in record order.
func templateFields(variant int) []field {
	v6 := variant&variantV6 != 0
	src, dst, addrLen, icmp := uint16(ieSourceIPv4Address), uint16(ieDestinationIPv4Address), uint16(4), uint16(ieICMPTypeCodeIPv4)
	if v6 {
		src, dst, addrLen, icmp = ieSourceIPv6Address, ieDestinationIPv6Address, 16, ieICMPTypeCodeIPv6
	}
	fs := []field{
		{src, addrLen, 0},
		{dst, addrLen, 0},
		{ieSourceTransportPort, 2, 0},
		{ieDestinationTransport, 2, 0},
		{ieProtocolIdentifier, 1, 0},
		{ieOctetDeltaCount, 8, 0},
		{iePacketDeltaCount, 8, 0},
		{ieLayer2OctetDeltaCount, 8, 0},
		{ieTCPControlBits, 2, 0},
		{ieFlowStartMilliseconds, 8, 0},
		{ieFlowEndMilliseconds, 8, 0},
		{icmp, 2, 0},
		{ieIPClassOfService, 1, 0},
		{ieSourceMacAddress, 6, 0},
		{ieDestinationMacAddress, 6, 0},
		{ieEthernetType, 2, 0},
		{ieFlowDirection, 1, 0},
	}
	if variant&variantNAT != 0 {
		natSrc, natDst := uint16(iePostNATSourceIPv4), uint16(iePostNATDestinationIPv4)
		if v6 {
			natSrc, natDst = iePostNATSourceIPv6, iePostNATDestinationIPv6
		}
		fs = append(fs, field{natSrc, addrLen, 0}, field{natDst, addrLen, 0},
			field{iePostNAPTSourcePort, 2, 0}, field{iePostNAPTDestPort, 2, 0})
	}
	if variant&variantEnriched != 0 {
		pen := EnterpriseNumber
		fs = append(fs,
			field{ieFlDropPackets, 8, pen},
			field{ieFlDropBytes, 8, pen},
			field{ieFlDropCause, variableLength, pen},
			field{ieFlRTTNanoseconds, 8, pen},
			field{ieFlRetransmits, 8, pen},
			field{ieFlSampling, 4, pen},
			field{ieFlPartial, 1, pen},
			field{ieFlInterfaces, 1, pen})
	}
	return fs
}

// recordLen is the fixed length of a variant's data records; a
// variable-length element counts its one-byte length prefix, its content
// is added per record.
func recordLen(variant int) int {
	n := 0
	for _, f := range templateFields(variant) {
		if f.length == variableLength {
			n++
		} else {
			n += int(f.length)
		}
	}
	return n
}

var (
	// recLen is the data record length of each variant.
	recLen = func() (l [variants]int) {
		for v := range l {
			l[v] = recordLen(v)
		}
		return l
	}()
	// templateRecords are the template records of every variant, built once.
	templateRecords = buildTemplateRecords()
)

func buildTemplateRecords() (out [][]byte) {
	for v := range variants {
		fs := templateFields(v)
		b := binary.BigEndian.AppendUint16(nil, TemplateIPv4+uint16(v))
		b = binary.BigEndian.AppendUint16(b, uint16(len(fs)))
		for _, f := range fs {
			if f.pen != 0 {
				b = binary.BigEndian.AppendUint16(b, f.id|enterpriseBit)
				b = binary.BigEndian.AppendUint16(b, f.length)
				b = binary.BigEndian.AppendUint32(b, f.pen)
				continue
			}
			b = binary.BigEndian.AppendUint16(b, f.id)
			b = binary.BigEndian.AppendUint16(b, f.length)
		}
		out = append(out, b)
	}
	return out
}

// templateSets packs the template records into template sets, each small
// enough to travel in a message of at most max bytes: one set with all of
// them at the default size, more below about 950 bytes.
func templateSets(max int) (sets [][]byte) {
	var b []byte
	for _, r := range templateRecords {
		if b != nil && headerLen+len(b)+len(r) > max {
			binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
			sets, b = append(sets, b), nil
		}
		if b == nil {
			b = binary.BigEndian.AppendUint16(nil, templateSetID)
			b = append(b, 0, 0) // length, when the set is complete
		}
		b = append(b, r...)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return append(sets, b)
}

// OctetDeltaCount is the record's octets as IPFIX defines octetDeltaCount
// (IP header and payload). Record.Bytes counts L2 frames: on a device with
// an Ethernet header (the flow has a MAC address or an ethernet type other
// than that of a bare IP packet) 14 bytes per packet are taken off; flows
// seen by the _l3 programs (no L2 header: both MACs zero) are left as they
// are. A VLAN tag counted in Bytes is not known to the record and stays in
// (4 bytes per tagged packet too many).
func OctetDeltaCount(r *flow.Record) uint64 {
	if r.SrcMAC == ([6]byte{}) && r.DstMAC == ([6]byte{}) {
		return r.Bytes
	}
	l2 := ethHeaderLen * r.Packets
	if l2 > r.Bytes {
		return 0
	}
	return r.Bytes - l2
}

// Config configures an Exporter.
type Config struct {
	// Target is the collector's host:port.
	Target string
	// Transport is "udp" (default) or "tcp".
	Transport string
	// DomainID is the observation domain id of every message.
	DomainID uint32
	// TemplateRefresh is how often the templates are resent over UDP
	// (0: DefaultTemplateRefresh).
	TemplateRefresh time.Duration
	// MaxMessageBytes bounds each IPFIX message (0: DefaultMaxMessageBytes;
	// 512 to 65535).
	MaxMessageBytes int
	// DialTimeout bounds a TCP connection attempt (0: DefaultDialTimeout).
	DialTimeout time.Duration
	Logger      *slog.Logger
}

// Stats are cumulative counts, safe to read concurrently.
type Stats struct {
	Messages  atomic.Uint64 // messages sent
	Flows     atomic.Uint64 // data records in them
	Bytes     atomic.Uint64 // bytes of those messages
	Templates atomic.Uint64 // messages that carried the templates
	Errors    atomic.Uint64 // failed sends (the message is lost)
}

// Exporter sends flows to an IPFIX collector.
type Exporter struct {
	cfg   Config
	log   *slog.Logger
	Stats Stats

	mu           sync.Mutex
	w            io.Writer // the connection; nil over TCP until (re)dialled
	conn         net.Conn
	buf          []byte
	seq          uint32 // data records sent before the message being built
	lastTemplate time.Time
	sendTemplate bool     // the next message starts with the templates
	templates    [][]byte // template sets (templateSets of MaxMessageBytes)
	now          func() time.Time
	closed       bool
}

// CheckConfig returns the first problem with cfg's target, transport or
// sizes, without connecting.
func CheckConfig(cfg Config) error {
	if cfg.Target == "" {
		return errors.New("no target (host:port)")
	}
	host, port, err := net.SplitHostPort(cfg.Target)
	if err != nil {
		return fmt.Errorf("target %q: %w", cfg.Target, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("target %q: port must be a number from 1 to 65535", cfg.Target)
	}
	if host == "" {
		return fmt.Errorf("target %q: no host", cfg.Target)
	}
	switch cfg.Transport {
	case "", "udp", "tcp":
	default:
		return fmt.Errorf("transport %q: must be udp or tcp", cfg.Transport)
	}
	if m := cfg.MaxMessageBytes; m != 0 && (m < minMessage || m > maxMessage) {
		return fmt.Errorf("max message bytes %d: must be from %d to %d", m, minMessage, maxMessage)
	}
	if cfg.TemplateRefresh < 0 {
		return fmt.Errorf("template refresh %v: must not be negative", cfg.TemplateRefresh)
	}
	return nil
}

// New checks cfg and returns an Exporter. Over UDP the socket is connected
// at once (resolving the target); over TCP the connection is made by the
// first Export and remade after a failure.
func New(cfg Config) (*Exporter, error) {
	if err := CheckConfig(cfg); err != nil {
		return nil, err
	}
	if cfg.Transport == "" {
		cfg.Transport = DefaultTransport
	}
	if cfg.TemplateRefresh == 0 {
		cfg.TemplateRefresh = DefaultTemplateRefresh
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Exporter{cfg: cfg, log: cfg.Logger, buf: make([]byte, 0, cfg.MaxMessageBytes),
		sendTemplate: true, now: time.Now, templates: templateSets(cfg.MaxMessageBytes)}
	if cfg.Transport == "udp" {
		c, err := net.Dial("udp", cfg.Target)
		if err != nil {
			return nil, fmt.Errorf("target %q: %w", cfg.Target, err)
		}
		e.conn, e.w = c, c
	}
	return e, nil
}

// Name implements exporter.Exporter.
func (e *Exporter) Name() string { return "ipfix" }

// Export encodes the batch into as few messages as MaxMessageBytes allows
// and sends them. Over UDP a failed send loses that message and the others
// are still sent; the first error is returned.
func (e *Exporter) Export(ctx context.Context, batch []flow.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("ipfix exporter closed")
	}
	if e.w == nil {
		if err := e.dial(ctx); err != nil {
			return err
		}
	}
	now := e.now()
	if e.cfg.Transport == "udp" && now.Sub(e.lastTemplate) >= e.cfg.TemplateRefresh {
		e.sendTemplate = true
	}
	var firstErr error
	if err := e.leadingTemplates(now); err != nil {
		if e.w == nil {
			return err
		}
		firstErr = err
	}
	e.begin(now)
	setStart, setID, inMsg := -1, uint16(0), 0
	for i := range batch {
		r := &batch[i]
		v := recordVariant(r)
		id, n := TemplateIPv4+uint16(v), recLen[v]
		if v&variantEnriched != 0 {
			n += len(dropCause(r))
		}
		need := n
		if setStart < 0 || setID != id {
			need += setHeaderLen
		}
		// Full (a message with nothing but templates is sent on its own).
		if len(e.buf)+need > e.cfg.MaxMessageBytes && len(e.buf) > headerLen {
			e.endSet(setStart)
			if err := e.flush(inMsg); err != nil {
				if e.w == nil { // TCP: the connection is gone, and the rest of the batch with it
					return err
				}
				if firstErr == nil {
					firstErr = err
				}
			}
			e.begin(now)
			setStart, inMsg = -1, 0
		}
		if setStart < 0 || setID != id {
			e.endSet(setStart)
			setStart, setID = len(e.buf), id
			e.buf = binary.BigEndian.AppendUint16(e.buf, id)
			e.buf = append(e.buf, 0, 0)
		}
		e.buf = appendRecord(e.buf, r, v)
		inMsg++
	}
	if inMsg > 0 || e.sendTemplate {
		e.endSet(setStart)
		if err := e.flush(inMsg); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// header starts a message in buf: the header, its length and sequence
// number set by flush.
func (e *Exporter) header(now time.Time) {
	b := e.buf[:0]
	b = binary.BigEndian.AppendUint16(b, version)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(now.Unix()))
	b = binary.BigEndian.AppendUint32(b, 0)
	e.buf = binary.BigEndian.AppendUint32(b, e.cfg.DomainID)
}

// begin starts a message: the header and, when due, the (last) template set.
func (e *Exporter) begin(now time.Time) {
	e.header(now)
	if e.sendTemplate {
		e.buf = append(e.buf, e.templates[len(e.templates)-1]...)
	}
}

// leadingTemplates sends, when the templates are due and do not fit in one
// message (MaxMessageBytes under about 950), every template set but the
// last in messages of their own; the last one opens the first data message.
func (e *Exporter) leadingTemplates(now time.Time) error {
	if !e.sendTemplate {
		return nil
	}
	var firstErr error
	for _, set := range e.templates[:len(e.templates)-1] {
		e.header(now)
		e.buf = append(e.buf, set...)
		if err := e.send(0); err != nil {
			if e.w == nil {
				return err
			}
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}

// endSet writes the length of the set started at start (-1: none).
func (e *Exporter) endSet(start int) {
	if start >= 0 {
		binary.BigEndian.PutUint16(e.buf[start+2:], uint16(len(e.buf)-start))
	}
}

// flush sends the message in buf, holding n data records, and notes the
// templates sent if it carried them.
func (e *Exporter) flush(n int) error {
	withTemplate := e.sendTemplate
	if err := e.send(n); err != nil {
		return err
	}
	if withTemplate {
		e.Stats.Templates.Add(1)
		e.sendTemplate = false
		e.lastTemplate = e.now()
	}
	return nil
}

// send sends the message in buf, holding n data records.
func (e *Exporter) send(n int) error {
	binary.BigEndian.PutUint16(e.buf[2:], uint16(len(e.buf)))
	binary.BigEndian.PutUint32(e.buf[8:], e.seq)
	if _, err := e.w.Write(e.buf); err != nil {
		e.Stats.Errors.Add(1)
		if e.cfg.Transport == "tcp" {
			// The stream is broken: reconnect (and resend the templates)
			// at the next Export.
			e.conn.Close()
			e.conn, e.w = nil, nil
		}
		return fmt.Errorf("ipfix send to %s: %w", e.cfg.Target, err)
	}
	e.seq += uint32(n)
	e.Stats.Messages.Add(1)
	e.Stats.Flows.Add(uint64(n))
	e.Stats.Bytes.Add(uint64(len(e.buf)))
	return nil
}

func (e *Exporter) dial(ctx context.Context) error {
	d := net.Dialer{Timeout: e.cfg.DialTimeout}
	c, err := d.DialContext(ctx, "tcp", e.cfg.Target)
	if err != nil {
		e.Stats.Errors.Add(1)
		return fmt.Errorf("ipfix connect to %s: %w", e.cfg.Target, err)
	}
	e.conn, e.w = c, c
	e.sendTemplate = true // a new connection is a new session (RFC 7011 §8.1)
	return nil
}

// recordVariant is the variant (so the template) of r's data record.
func recordVariant(r *flow.Record) int {
	v := 0
	if !r.SrcAddr.Is4() {
		v |= variantV6
	}
	if r.Translated() {
		v |= variantNAT
	}
	if Enriched(r) {
		v |= variantEnriched
	}
	return v
}

// Enriched reports whether r goes out with flowlens's enterprise-specific
// elements: it has drops, an RTT, retransmits, is partial, or was sampled
// (a rate above 1). Other flows keep the standard templates.
func Enriched(r *flow.Record) bool {
	return r.DropPackets != 0 || r.DropBytes != 0 || r.DropCause != "" || r.RTT != 0 ||
		r.Retransmits != 0 || r.Partial || r.Sampling > 1
}

// dropCause is the drop cause as sent, at most MaxDropCause bytes.
func dropCause(r *flow.Record) string {
	if len(r.DropCause) > MaxDropCause {
		return r.DropCause[:MaxDropCause]
	}
	return r.DropCause
}

// PostNAT returns the source and destination after NAT as the NAT template
// exports them: a side conntrack did not translate (its address not set)
// keeps the flow's own address and port, as does one whose address is not
// of the flow's family; an IPv4-mapped IPv6 address is sent as IPv4.
func PostNAT(r *flow.Record) (src netip.Addr, srcPort uint16, dst netip.Addr, dstPort uint16) {
	src, srcPort, dst, dstPort = r.SrcAddr, r.SrcPort, r.DstAddr, r.DstPort
	if a := r.XlatSrcAddr.Unmap(); a.IsValid() && a.Is4() == r.SrcAddr.Is4() {
		src, srcPort = a, r.XlatSrcPort
	}
	if a := r.XlatDstAddr.Unmap(); a.IsValid() && a.Is4() == r.SrcAddr.Is4() {
		dst, dstPort = a, r.XlatDstPort
	}
	return
}

func appendAddr(b []byte, a netip.Addr, v6 bool) []byte {
	if v6 {
		x := a.As16()
		return append(b, x[:]...)
	}
	x := a.As4()
	return append(b, x[:]...)
}

// appendRecord appends r's data record in the template order of variant.
func appendRecord(b []byte, r *flow.Record, variant int) []byte {
	v6 := variant&variantV6 != 0
	if v6 {
		s, d := r.SrcAddr.As16(), r.DstAddr.As16()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	} else {
		s, d := r.SrcAddr.As4(), r.DstAddr.As4()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, r.SrcPort)
	b = binary.BigEndian.AppendUint16(b, r.DstPort)
	b = append(b, r.Proto)
	b = binary.BigEndian.AppendUint64(b, OctetDeltaCount(r))
	b = binary.BigEndian.AppendUint64(b, r.Packets)
	b = binary.BigEndian.AppendUint64(b, r.Bytes)
	b = binary.BigEndian.AppendUint16(b, r.TCPFlags&0xff) // the header flags; our markers are not TCP bits
	b = binary.BigEndian.AppendUint64(b, uint64(r.StartTime.UnixMilli()))
	b = binary.BigEndian.AppendUint64(b, uint64(r.EndTime.UnixMilli()))
	b = binary.BigEndian.AppendUint16(b, ICMPTypeCode(r))
	b = append(b, r.DSCP<<2)
	b = append(b, r.SrcMAC[:]...)
	b = append(b, r.DstMAC[:]...)
	b = binary.BigEndian.AppendUint16(b, r.EthType)
	b = append(b, FlowDirection(r))
	if variant&variantNAT != 0 {
		src, sp, dst, dp := PostNAT(r)
		b = appendAddr(b, src, v6)
		b = appendAddr(b, dst, v6)
		b = binary.BigEndian.AppendUint16(b, sp)
		b = binary.BigEndian.AppendUint16(b, dp)
	}
	if variant&variantEnriched != 0 {
		b = binary.BigEndian.AppendUint64(b, r.DropPackets)
		b = binary.BigEndian.AppendUint64(b, r.DropBytes)
		c := dropCause(r)
		b = append(b, byte(len(c)))
		b = append(b, c...)
		rtt := r.RTT
		if rtt < 0 {
			rtt = 0
		}
		b = binary.BigEndian.AppendUint64(b, uint64(rtt))
		b = binary.BigEndian.AppendUint64(b, r.Retransmits)
		b = binary.BigEndian.AppendUint32(b, r.Sampling)
		partial := byte(2) // RFC 7011 §6.1.5: false
		if r.Partial {
			partial = 1
		}
		b = append(b, partial)
		ifs := len(r.Interfaces)
		if ifs > 255 {
			ifs = 255
		}
		b = append(b, byte(ifs))
	}
	return b
}

// ICMPTypeCode is icmpTypeCodeIPv4/IPv6: type << 8 | code for ICMP and
// ICMPv6 flows, 0 otherwise.
func ICMPTypeCode(r *flow.Record) uint16 {
	if r.Proto == 1 || r.Proto == 58 {
		return uint16(r.IcmpType)<<8 | uint16(r.IcmpCode)
	}
	return 0
}

// FlowDirection is flowDirection of the flow's first interface (the one its
// counters come from): 1 egress, 0 ingress (also when unknown).
func FlowDirection(r *flow.Record) uint8 {
	if len(r.Interfaces) > 0 && r.Interfaces[0].Direction == flow.DirEgress {
		return 1
	}
	return 0
}

// Close closes the connection. Nothing is buffered between exports.
func (e *Exporter) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	if e.conn != nil {
		err := e.conn.Close()
		e.conn, e.w = nil, nil
		return err
	}
	return nil
}

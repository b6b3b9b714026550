// Package ipfix exports flows as IPFIX (RFC 7011) messages over UDP or TCP,
// to any IPFIX collector (nfdump, goflow2, Elastiflow, ntopng, Wireshark).
//
// Each message carries as many flows as fit in MaxMessageBytes (by default
// over UDP the path MTU less 100 bytes for the headers and an encapsulation,
// 1400 under a 1500-byte MTU; 65535 over TCP), never one message per flow. Templates of
// standard IANA Information Elements describe the records (templates.go):
// one per address family, and for flows that carry them the optional groups
// added (NAT, flowlens's enrichment, DNS and TLS elements, the last three
// under an enterprise number), so a flow pays only for the fields it has;
// every record carries the flow's interfaces as an RFC 6313
// subTemplateList. Over UDP the templates are sent in the first message and
// again every TemplateRefresh, so a collector that restarts can decode again
// within that interval; over TCP they are sent at the start of each
// connection, and a lost connection is remade with exponential backoff
// (transport.go).
//
// The encoding is hand-written with encoding/binary into one reused buffer
// (record.go): no allocation per flow in steady state.
//
// A data record is the core fields, then the optional blocks the flow has
// (blocks.go), each in the file of the feature it carries (xlat.go,
// dns.go, tls.go; enriched.go for the drops, rtt and retransmits groups).
// Each feature group names its block and elements in its file (drops.go
// ...); GroupElements lists a feature's elements by name. The lists of
// groups and blocks and the blocks' calls are generated from the feature
// registry and the blocks' files (zz_generated.groups.go, groupgen).
package ipfix

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/agent/ipfixsize"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Defaults of Config.
const (
	DefaultTransport       = "udp"
	DefaultDomainID        = 1
	DefaultTemplateRefresh = time.Minute
	// DefaultMaxMessageBytes is the message size over UDP when the kernel
	// does not tell the path MTU (pathMessageBytes derives it otherwise): a
	// 1500-byte path MTU less the IPv6 (40) and UDP (8) headers, with room
	// for an encapsulation (VXLAN, Geneve) on the way.
	DefaultMaxMessageBytes = 1400
	// DefaultMaxMessageBytesTCP is the message size over TCP, where the
	// stream splits messages into segments: the largest IPFIX message.
	DefaultMaxMessageBytesTCP = ipfixsize.Max
	DefaultDialTimeout        = 10 * time.Second
	DefaultBackoffBase        = time.Second
	DefaultBackoffMax         = 30 * time.Second
	// DefaultWriteTimeout bounds one message's write: a collector that
	// accepts and stops reading fills the socket's buffers, and the write
	// then fails (the message's flows counted lost, the connection remade)
	// instead of blocking for the kernel's retransmission timeout.
	DefaultWriteTimeout = 5 * time.Second
)

const (
	version       = 10
	headerLen     = 16
	setHeaderLen  = 4
	templateSetID = 2
)

// Config configures an Exporter.
type Config struct {
	// Target is the collector's host:port.
	Target string
	// Transport is "udp" (default) or "tcp".
	Transport string
	// DomainID is the observation domain id of every message.
	DomainID uint32
	// EnterpriseNumber is the PEN of flowlens's enterprise-specific
	// elements (0: EnterpriseNumber, the documentation PEN).
	EnterpriseNumber uint32
	// TemplateRefresh is how often the templates are resent over UDP
	// (0: DefaultTemplateRefresh).
	TemplateRefresh time.Duration
	// MaxMessageBytes bounds each IPFIX message (0: over UDP derived from
	// the path MTU, pathMessageBytes: 1400 for 1500; DefaultMaxMessageBytesTCP
	// over TCP; ipfixsize.Min to ipfixsize.MaxUDP over UDP, to
	// ipfixsize.Max over TCP).
	MaxMessageBytes int
	// DialTimeout bounds a connection attempt and a lookup of the target
	// (0: DefaultDialTimeout).
	DialTimeout time.Duration
	// WriteTimeout bounds the write of one message over TCP (0:
	// DefaultWriteTimeout): each write has at least half of it and at most
	// all of it (the deadline is moved only when less than half is left,
	// so that a message costs a clock read, not a timer update). A UDP
	// write does not wait for the collector, so it has none: a deadline
	// on the socket keeps a runtime timer armed, which cost IPFIX over UDP
	// 1.7 times its CPU per flow in BenchmarkEviction.
	WriteTimeout time.Duration
	// Resolver resolves the target's name at each (re)connection and, over
	// UDP, when the templates are due (nil: net.DefaultResolver; tests
	// point it at their DNS server).
	Resolver *net.Resolver
	// BackoffBase and BackoffMax space the connection attempts after a
	// failure: BackoffBase after the first, doubled per further failure,
	// at most BackoffMax (0: DefaultBackoffBase, DefaultBackoffMax), each
	// wait drawn from its upper half (jitter).
	BackoffBase, BackoffMax time.Duration
	Logger                  *slog.Logger
}

// Stats are cumulative counts, safe to read concurrently: the delivery
// statistics every exporter keeps (Messages, Bytes, Records: the IPFIX
// messages sent, their bytes and data records; Templates: messages that
// carried the templates; SendErrors: failed sends and TCP connection
// attempts; FailedFlows: flows in messages that could not be sent), and
// the TCP connections made.
type Stats struct {
	exporter.DeliveryStats
	Connects atomic.Uint64
}

// ipfixCounts are the delivery counts an IPFIX exporter learns: what it
// sent, and what failed to leave; IPFIX has no acknowledgements.
const ipfixCounts = exporter.CountMessages | exporter.CountTemplates | exporter.CountSendErrors | exporter.CountFailed

// The metrics read the exporter through these (exporter.NewCollector).
var (
	_ exporter.Delivering = (*Exporter)(nil)
	_ exporter.Connector  = (*Exporter)(nil)
)

// Delivery is the exporter's delivery statistics (exporter.Delivering).
func (e *Exporter) Delivery() (*exporter.DeliveryStats, exporter.Counts) {
	return &e.Stats.DeliveryStats, ipfixCounts
}

// Exporter sends flows to an IPFIX collector.
type Exporter struct {
	cfg   Config
	log   *slog.Logger
	Stats Stats

	mu           sync.Mutex
	conn         *conn                // nil over TCP until (re)connected
	deadline     time.Time            // conn's write deadline (send moves it)
	live         atomic.Pointer[conn] // conn, for Connected without mu (held by a reconnecting Export)
	buf          []byte
	seq          uint32 // data records sent in this session before the message being built
	lastTemplate time.Time
	sendTemplate bool     // the next message starts with the templates
	templates    [][]byte // template sets (templateSets of MaxMessageBytes)
	now          func() time.Time
	failures     int // TCP connection attempts failed in a row
	closed       chan struct{}
	life         context.Context // cancelled by Close
	end          context.CancelFunc
	closeOnce    sync.Once
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
	if err := ipfixsize.Check(cfg.MaxMessageBytes, cfg.Transport); err != nil {
		return fmt.Errorf("max message bytes %d: %w", cfg.MaxMessageBytes, err)
	}
	if cfg.TemplateRefresh < 0 {
		return fmt.Errorf("template refresh %v: must not be negative", cfg.TemplateRefresh)
	}
	return nil
}

func transportName(t string) string {
	if t == "" {
		return DefaultTransport
	}
	return t
}

// New checks cfg and returns an Exporter. Over UDP the socket is connected
// at once (resolving the target); over TCP the connection is made by the
// first Export. Either is remade after a failure, the target resolved
// again (connect).
func New(cfg Config) (*Exporter, error) {
	if err := CheckConfig(cfg); err != nil {
		return nil, err
	}
	cfg.Transport = transportName(cfg.Transport)
	if cfg.TemplateRefresh == 0 {
		cfg.TemplateRefresh = DefaultTemplateRefresh
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	var udp net.Conn
	if cfg.Transport == "udp" {
		d := net.Dialer{Timeout: cfg.DialTimeout, Resolver: cfg.Resolver}
		c, err := d.Dial("udp", cfg.Target)
		if err != nil {
			return nil, fmt.Errorf("target %q: %w", cfg.Target, err)
		}
		udp = c
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytesTCP
		if udp != nil {
			cfg.MaxMessageBytes = pathMessageBytes(udp)
		}
	}
	if cfg.EnterpriseNumber == 0 {
		cfg.EnterpriseNumber = EnterpriseNumber
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = DefaultBackoffBase
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Exporter{cfg: cfg, log: cfg.Logger, buf: make([]byte, 0, cfg.MaxMessageBytes),
		sendTemplate: true, now: time.Now, templates: templateSets(cfg.EnterpriseNumber, cfg.MaxMessageBytes),
		closed: make(chan struct{})}
	e.life, e.end = context.WithCancel(context.Background())
	if udp != nil {
		e.setConn(newConn(udp, false))
	}
	e.log.Info("ipfix exporter", "target", cfg.Target, "transport", cfg.Transport, "max_message_bytes", cfg.MaxMessageBytes,
		"enterprise_number", cfg.EnterpriseNumber)
	return e, nil
}

// Name implements exporter.Exporter.
func (e *Exporter) Name() string { return "ipfix" }

// Connected reports whether the exporter has a working connection: over
// TCP one that is open and not closed by the collector; over UDP a socket
// (none only while a moved target's new one is being made).
func (e *Exporter) Connected() bool {
	c := e.live.Load()
	return c != nil && !c.broken()
}

// setConn sets the connection (nil: none).
func (e *Exporter) setConn(c *conn) {
	e.conn, e.deadline = c, time.Time{}
	e.live.Store(c)
}

// Export encodes the batch into as few messages as MaxMessageBytes allows
// and sends them, each write bounded by WriteTimeout. A failed send loses
// that message (counted in Stats.FailedFlows); over TCP it drops the
// connection, remade with backoff, the target resolved again, and the rest
// of the batch is sent on the new one (after the templates).
// Export blocks meanwhile, until ctx ends or the exporter is closed (then
// the rest is counted lost). Over UDP, when the templates are due, a
// target whose name now resolves elsewhere is reconnected to. The first
// error is returned.
func (e *Exporter) Export(ctx context.Context, batch []flow.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var firstErr error
	note := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	now := e.now()
	for i := 0; i < len(batch); {
		if err := e.connect(ctx); err != nil {
			e.Stats.FailedFlows.Add(uint64(len(batch) - i))
			return errors.Join(firstErr, err)
		}
		if e.cfg.Transport == "udp" && !e.sendTemplate && now.Sub(e.lastTemplate) >= e.cfg.TemplateRefresh {
			e.sendTemplate = true
			if e.moved(ctx) {
				e.disconnect()
				continue // a new socket to the new address (a new session)
			}
		}
		if err := e.leadingTemplates(now); err != nil {
			note(err)
			if e.conn == nil {
				continue // TCP: the connection is gone; remake it, the templates go again
			}
		}
		n := e.fill(batch[i:], now)
		if err := e.flush(n); err != nil {
			note(err)
			e.Stats.FailedFlows.Add(uint64(n))
		}
		i += n
	}
	if len(batch) == 0 && e.sendTemplate && e.conn != nil {
		// Nothing to send but the templates are due: a message of their own.
		if err := e.leadingTemplates(now); err == nil {
			e.header(now)
			e.buf = append(e.buf, e.templates[len(e.templates)-1]...)
			note(e.flush(0))
		} else {
			note(err)
		}
	}
	return firstErr
}

// fill builds in buf the next message: the header, the last template set
// when the templates are due, then data sets of as many of batch's flows as
// fit, one set per run of flows of the same template. It returns how many
// flows it holds (0 only when the templates left no room for a record).
func (e *Exporter) fill(batch []flow.Record, now time.Time) int {
	e.header(now)
	if e.sendTemplate {
		e.buf = append(e.buf, e.templates[len(e.templates)-1]...)
	}
	setStart, setID := -1, uint16(0)
	n := 0
	for i := range batch {
		r := &batch[i]
		v := recordVariant(r)
		id, need := templateID(v), recordLen(r, v)
		if setID != id {
			need += setHeaderLen
		}
		// Full. A message without a record always takes one: ipfixsize.Min
		// leaves room for the largest after the headers (maxRecordLen).
		if len(e.buf)+need > e.cfg.MaxMessageBytes && (n > 0 || e.sendTemplate) {
			break
		}
		if setID != id {
			e.endSet(setStart)
			setStart, setID = len(e.buf), id
			e.buf = binary.BigEndian.AppendUint16(e.buf, id)
			e.buf = append(e.buf, 0, 0)
		}
		e.buf = appendRecord(e.buf, r, v)
		n++
	}
	e.endSet(setStart)
	return n
}

// header starts a message in buf: the header, its length and sequence
// number set by send.
func (e *Exporter) header(now time.Time) {
	b := e.buf[:0]
	b = binary.BigEndian.AppendUint16(b, version)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(now.Unix()))
	b = binary.BigEndian.AppendUint32(b, 0)
	e.buf = binary.BigEndian.AppendUint32(b, e.cfg.DomainID)
}

// leadingTemplates sends, when the templates are due and do not fit in one
// message, every template set but the last in messages of their own; the
// last one opens the next data message (fill).
func (e *Exporter) leadingTemplates(now time.Time) error {
	if !e.sendTemplate {
		return nil
	}
	for _, set := range e.templates[:len(e.templates)-1] {
		e.header(now)
		e.buf = append(e.buf, set...)
		if err := e.send(0); err != nil {
			return err
		}
	}
	return nil
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

// send sends the message in buf, holding n data records (over TCP within
// WriteTimeout). Over TCP a failed send drops the connection (a stream a
// message was partly written to is no longer framed): the next message
// remakes it, after a backoff. A UDP socket is kept: a refused send (the
// collector's port closed, an ICMP error) loses that message only, and the
// collector gets the next ones once it is back.
func (e *Exporter) send(n int) error {
	binary.BigEndian.PutUint16(e.buf[2:], uint16(len(e.buf)))
	binary.BigEndian.PutUint32(e.buf[8:], e.seq)
	if e.cfg.Transport == "tcp" {
		if now := time.Now(); now.Add(e.cfg.WriteTimeout / 2).After(e.deadline) {
			e.deadline = now.Add(e.cfg.WriteTimeout)
			e.conn.SetWriteDeadline(e.deadline)
		}
	}
	if _, err := e.conn.Write(e.buf); err != nil {
		e.Stats.SendErrors.Add(1)
		if e.cfg.Transport == "tcp" {
			e.failures++
			e.disconnect()
		}
		return fmt.Errorf("ipfix send to %s: %w", e.cfg.Target, err)
	}
	e.seq += uint32(n)
	e.failures = 0
	e.Stats.Messages.Add(1)
	e.Stats.Records.Add(uint64(n))
	e.Stats.Bytes.Add(uint64(len(e.buf)))
	return nil
}

// Close closes the connection and ends an Export waiting to reconnect or
// blocked in a write (closing the connection under it fails the write at
// once): it never waits for a stuck collector. Nothing is buffered
// between exports.
func (e *Exporter) Close() error {
	e.closeOnce.Do(func() { close(e.closed); e.end() })
	var err error
	c := e.live.Load()
	if c != nil {
		err = c.Close() // a write in progress returns; Export then releases mu
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.conn != nil && e.conn != c {
		err = e.conn.Close()
	}
	e.setConn(nil)
	return err
}

package ipfix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"time"
)

// errClosed is Export's error after Close.
var errClosed = errors.New("ipfix exporter closed")

// conn is the connection to the collector. Over TCP a reader notices the
// collector closing it (an IPFIX collector never writes): the exporter
// then reconnects before its next message instead of writing into a dead
// stream, where the first message would vanish without an error.
type conn struct {
	net.Conn
	gone atomic.Bool // the collector closed the stream (TCP)
}

func newConn(c net.Conn, watch bool) *conn {
	x := &conn{Conn: c}
	if watch {
		go func() {
			io.Copy(io.Discard, c) // returns at EOF, reset, or our Close
			x.gone.Store(true)
		}()
	}
	return x
}

func (c *conn) broken() bool { return c.gone.Load() }

// connect makes sure there is a connection to send on. It drops one the
// collector closed (TCP) and, when none is left (a failed send, a closed
// stream, a target that moved), dials a new one, resolving the target's
// name again (Config.Resolver) so that a collector whose address changed is
// found, and waiting before each attempt that follows a failure
// (exponential backoff with jitter). A new connection is a new session
// (RFC 7011 §8.1; over UDP a new socket, so a new source port): the
// templates go first and the sequence restarts at 0. It returns when
// connected, or when ctx ends or the exporter is closed (with the last
// connection error, if any).
func (e *Exporter) connect(ctx context.Context) error {
	select {
	case <-e.closed:
		return errClosed
	default:
	}
	if e.conn != nil && e.conn.broken() {
		e.log.Warn("ipfix collector closed the connection; reconnecting", "target", e.cfg.Target)
		e.disconnect()
		e.failures++
	}
	if e.conn != nil {
		return nil
	}
	// Close ends the wait and a dial in progress too (an exporter that is
	// connected pays nothing for this).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	var last error
	for {
		if e.failures > 0 {
			t := time.NewTimer(jitter(backoff(e.failures, e.cfg.BackoffBase, e.cfg.BackoffMax)))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return e.stopped(ctx, last)
			}
		}
		c, err := e.dial(ctx)
		if err == nil {
			e.setConn(newConn(c, e.cfg.Transport == "tcp"))
			e.Stats.Connects.Add(1)
			e.sendTemplate, e.seq = true, 0
			e.log.Info("ipfix connected", "target", e.cfg.Target, "address", c.RemoteAddr().String(), "transport", e.cfg.Transport)
			return nil
		}
		e.Stats.SendErrors.Add(1)
		e.failures++
		last = fmt.Errorf("ipfix connect to %s: %w", e.cfg.Target, err)
		if e.failures == 1 || e.failures%10 == 0 {
			e.log.Warn("ipfix collector unreachable; retrying with backoff", "target", e.cfg.Target,
				"attempts", e.failures, "error", err)
		}
		if ctx.Err() != nil {
			return e.stopped(ctx, last)
		}
	}
}

// dial connects to the target over the configured transport, resolving
// its name now.
func (e *Exporter) dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: e.cfg.DialTimeout, Resolver: e.cfg.Resolver}
	return d.DialContext(ctx, e.cfg.Transport, e.cfg.Target)
}

// moved reports whether the target's name no longer resolves to the
// address the UDP socket sends to (asked when the templates are due: a UDP
// collector that moved gives no error to notice). A failed lookup keeps
// the socket.
func (e *Exporter) moved(ctx context.Context) bool {
	host, _, _ := net.SplitHostPort(e.cfg.Target)
	if _, err := netip.ParseAddr(host); err == nil || e.conn == nil {
		return false // an address literal never moves
	}
	cur, ok := e.conn.RemoteAddr().(*net.UDPAddr)
	if !ok {
		return false
	}
	r := e.cfg.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.DialTimeout)
	defer cancel()
	stop := context.AfterFunc(e.life, cancel) // Close does not wait for the lookup
	defer stop()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		e.log.Warn("ipfix target lookup failed; keeping its last address", "target", e.cfg.Target, "error", err)
		return false
	}
	now := cur.AddrPort().Addr().Unmap()
	for _, a := range addrs {
		if a.Unmap() == now {
			return false
		}
	}
	e.log.Info("ipfix target moved; reconnecting", "target", e.cfg.Target, "from", now.String())
	return true
}

// stopped is connect's error when it gives up: the last connection error
// and why it stopped trying (the exporter closed, or ctx's error).
func (e *Exporter) stopped(ctx context.Context, last error) error {
	select {
	case <-e.closed:
		return errors.Join(last, errClosed)
	default:
		return errors.Join(last, ctx.Err())
	}
}

// disconnect closes the TCP connection; the next message reconnects.
func (e *Exporter) disconnect() {
	e.conn.Close()
	e.setConn(nil)
}

// jitter spreads a wait over its upper half, so that agents that lost the
// same collector do not all come back at the same instant.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// backoff is the wait before the next connection attempt after failures
// failed ones in a row: base, doubled per further failure, at most max.
func backoff(failures int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < failures && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

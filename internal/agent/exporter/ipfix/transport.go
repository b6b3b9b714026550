package ipfix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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

// connect makes sure there is a connection to send on. Over TCP it drops
// one the collector closed and dials a new one, waiting before each attempt
// that follows a failure (backoff); a new connection is a new session
// (RFC 7011 §8.1): the templates go first and the sequence restarts at 0.
// It returns when connected, or when ctx ends or the exporter is closed
// (with the last connection error, if any).
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
	if e.cfg.Transport != "tcp" {
		return errClosed // UDP: only Close takes the socket away
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
			t := time.NewTimer(backoff(e.failures, e.cfg.BackoffBase, e.cfg.BackoffMax))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return e.stopped(ctx, last)
			}
		}
		d := net.Dialer{Timeout: e.cfg.DialTimeout}
		c, err := d.DialContext(ctx, "tcp", e.cfg.Target)
		if err == nil {
			e.setConn(newConn(c, true))
			e.Stats.Connects.Add(1)
			e.sendTemplate, e.seq = true, 0
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

// backoff is the wait before the next connection attempt after failures
// failed ones in a row: base, doubled per further failure, at most max.
func backoff(failures int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < failures && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

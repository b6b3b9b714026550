package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// follow prints the streams' new flows in m's order until every stream
// has ended or ctx is done. A stream that fails ends the follow, as it
// does with one collector: the flows that wait are printed, then the error
// returned.
func follow(ctx context.Context, m *merger, items <-chan item, p *printer, stderr io.Writer) error {
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	var reported uint64      // m.early already reported
	var nextReport time.Time // at most one report of early flows a second
	reportEarly := func(now time.Time) {
		if m.early > reported {
			fmt.Fprintf(stderr, "flowlens observe: %d flows printed before the other collectors caught up: more than %d flows waited; the order across collectors may slip\n", m.early-reported, m.limit)
			reported, nextReport = m.early, now.Add(time.Second)
		}
	}
	// take handles an item; false: stop following (with the error).
	var failed error
	take := func(it item, open bool) bool {
		switch {
		case !open:
			return false
		case it.lost > 0:
			reportLost(stderr, it)
		case it.flow != nil:
			m.add(it.stream, it.flow, time.Now())
		case it.done:
			m.end(it.stream)
			if it.err != nil && ctx.Err() == nil {
				failed = fmt.Errorf("%s: %w", it.server, it.err)
				return false
			}
		}
		return true
	}
	for {
		// Sleep until the earliest-arrived flow's wait is over, or a
		// report of early flows is due.
		var wakeC <-chan time.Time
		when, ok := m.due()
		if m.early > reported && (!ok || nextReport.Before(when)) {
			when, ok = nextReport, true
		}
		if ok {
			wake.Reset(time.Until(when))
			wakeC = wake.C
		}
		select {
		case it, open := <-items:
			if !take(it, open) {
				return finish(m, p, failed, reportEarly)
			}
			// What else has arrived goes in before any flow is printed:
			// the flows of one batch are sorted together.
		drain:
			for m.waiting() < m.limit {
				select {
				case it, open := <-items:
					if !take(it, open) {
						return finish(m, p, failed, reportEarly)
					}
				default:
					break drain
				}
			}
		case <-wakeC:
		}
		now := time.Now()
		for f, ok := m.next(now); ok; f, ok = m.next(now) {
			if err := p.print(f); err != nil {
				return err
			}
		}
		if !now.Before(nextReport) {
			reportEarly(now)
		}
		if err := p.w.Flush(); err != nil {
			return err
		}
	}
}

// finish prints the flows that still wait, in order, and returns err.
func finish(m *merger, p *printer, err error, reportEarly func(time.Time)) error {
	for _, f := range m.rest() {
		if perr := p.print(f); perr != nil {
			return errors.Join(err, perr)
		}
	}
	reportEarly(time.Now())
	return errors.Join(err, p.w.Flush())
}

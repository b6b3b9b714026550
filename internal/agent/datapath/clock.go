package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Clock converts the datapath's timestamps, jiffies (bpf/clock.h), to
// CLOCK_MONOTONIC nanoseconds.
//
// The kernel advances jiffies from CLOCK_MONOTONIC: jiffy j begins at
// base + j·TICK_NSEC exactly (tick_do_update_jiffies64), so two numbers
// convert every timestamp for the life of the boot: base and the tick
// length. When loaded, Clock runs the flowlens_clock program (jiffies and
// the precise monotonic clock, read together) back to back and keeps the
// readings where jiffies moved since a reading at most 50 µs earlier: each
// brackets a tick's beginning that closely. The earliest bracket of all
// gives base (the tick interrupt's latency only makes a bracket late).
// The tick length is the resolution the kernel reports for its coarse
// clocks (LOW_RES_NSEC, which is TICK_NSEC): exact, so three brackets do,
// and the ticks' phase known from a first edge, Clock sleeps to just before
// each next one (tickEdges; spinning through three ticks cost every start
// 5 to 12 ms of CPU at HZ 250).
// Where it reports none, readings 60 ms apart measure it (the nearest
// CONFIG_HZ value within 1 %): a tick interrupt late by 1 ms on a loaded
// VM puts that 1.7 % off, so the measurement is only the fallback. The
// coarse clock's readings would not do for base: it moves in steps of the
// timekeeper's accumulation interval, whose phase is not the ticks'. When
// measuring, it spins for the first three brackets, sleeps through the
// rest of the 60 ms, and spins for one more: spinning the whole span cost
// every start 60 ms of CPU.
type Clock struct {
	prog *ebpf.Program
	tb   Timebase
}

const (
	clockSpan   = 60 * time.Millisecond  // between the first and last bracket
	clockTight  = 50 * time.Microsecond  // a bracket's width at most
	clockBudget = 2 * time.Second        // to find them, on a busy machine
	clockSpun   = 3                      // brackets found spinning before the sleep
	clockWake   = 300 * time.Microsecond // with the tick known: wake this long before an edge
	clockPoll   = 250 * time.Microsecond // and read this often until one gives the ticks' phase
)

func newClock(prog *ebpf.Program) (*Clock, error) {
	c := &Clock{prog: prog}
	tick := kernelTick()
	if tick != 0 {
		edges, err := c.tickEdges(tick, time.Now().Add(clockBudget))
		if err != nil {
			return nil, err
		}
		if len(edges) == 0 {
			return nil, fmt.Errorf("read the datapath clock: no clean tick edge in %v", clockBudget)
		}
		c.tb = timebaseTick(edges, tick)
		return c, nil
	}
	var edges []ClockSample
	prev, err := c.sample()
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(clockBudget); time.Now().Before(deadline); {
		n, err := c.sample()
		if err != nil {
			return nil, err
		}
		if n.Jiffies != prev.Jiffies && n.MonoNs-prev.MonoNs <= uint64(clockTight) {
			edges = append(edges, n)
			if tick != 0 && len(edges) >= clockSpun {
				break
			}
			if n.MonoNs-edges[0].MonoNs >= uint64(clockSpan) && len(edges) >= 3 {
				break
			}
			if len(edges) >= clockSpun {
				// Sleep to the span's end; the reading after it is
				// no bracket's start (it is too late), the spin
				// after it finds the next tick's.
				time.Sleep(time.Duration(int64(edges[0].MonoNs) + int64(clockSpan) - int64(n.MonoNs)))
				if n, err = c.sample(); err != nil {
					return nil, err
				}
			}
		}
		prev = n
	}
	if len(edges) < 2 || edges[len(edges)-1].MonoNs-edges[0].MonoNs < uint64(clockSpan)/3 {
		return nil, fmt.Errorf("read the datapath clock: %d clean tick edges in %v, want 2 at least 20 ms apart", len(edges), clockBudget)
	}
	c.tb = timebaseFrom(edges)
	return c, nil
}

// tickEdges finds clockSpun brackets with the tick length known, mostly
// asleep: it reads the clock every clockPoll until jiffies move (the
// reading before gives a lower bound of that edge's time, so of each next
// one, a tick apart), then sleeps to clockWake before the next edge
// (clock_nanosleep on CLOCK_MONOTONIC, the programs' clock: Go's timers
// wake up to a millisecond late) and spins across it. A late wake-up, past
// the edge, sleeps to the one after.
func (c *Clock) tickEdges(tick uint64, deadline time.Time) ([]ClockSample, error) {
	var edges []ClockSample
	prev, err := c.sample()
	if err != nil {
		return nil, err
	}
	spin := false
	for len(edges) < clockSpun && time.Now().Before(deadline) {
		n, err := c.sample()
		if err != nil {
			return nil, err
		}
		if n.Jiffies == prev.Jiffies {
			if !spin {
				sleepNs(unix.CLOCK_MONOTONIC, 0, uint64(clockPoll))
			}
			prev = n
			continue
		}
		if n.MonoNs-prev.MonoNs <= uint64(clockTight) {
			edges = append(edges, n)
		}
		// The next edge is at least a tick after prev's reading.
		next := prev.MonoNs + tick
		for time.Now().Before(deadline) {
			if next > uint64(clockWake) {
				sleepNs(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, next-uint64(clockWake))
			}
			w, err := c.sample()
			if err != nil {
				return nil, err
			}
			if w.Jiffies == n.Jiffies {
				prev, spin = w, true // before the edge: spin across it
				break
			}
			n, next = w, next+tick // woke up past it
		}
	}
	return edges, nil
}

// sleepNs sleeps ns nanoseconds on clock id, or to that time with
// TIMER_ABSTIME.
func sleepNs(id int32, flags int, ns uint64) {
	ts := unix.NsecToTimespec(int64(ns))
	for unix.ClockNanosleep(id, flags, &ts, &ts) == unix.EINTR && flags == 0 {
	}
}

// kernelTick is TICK_NSEC, the length of a jiffy, as the kernel reports
// it: the resolution of its coarse clocks (LOW_RES_NSEC). 0 when it
// reports nothing a tick could be (HZ 10 to 2000).
func kernelTick() uint64 {
	var ts unix.Timespec
	if unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &ts) != nil {
		return 0
	}
	if ns := ts.Nano(); ns >= 1e9/2000 && ns <= 1e9/10 {
		return uint64(ns)
	}
	return 0
}

// sample runs the program on a dummy frame, where it writes the reading.
func (c *Clock) sample() (ClockSample, error) {
	var s ClockSample
	in, out := make([]byte, 64), make([]byte, 64)
	if _, err := c.prog.Run(&ebpf.RunOptions{Data: in, DataOut: out}); err != nil {
		return s, fmt.Errorf("read the datapath clock: %w", err)
	}
	if _, err := binary.Decode(out, binary.NativeEndian, &s); err != nil {
		return s, fmt.Errorf("read the datapath clock: %w", err)
	}
	return s, nil
}

// Timebase returns the conversion, fixed for the boot once loaded.
func (c *Clock) Timebase() Timebase { return c.tb }

func (c *Clock) close() error { return c.prog.Close() }

// Timebase converts jiffies to CLOCK_MONOTONIC nanoseconds: jiffy j begins
// at Base + j·Tick.
type Timebase struct {
	Base int64  // ns; may be negative (jiffies start near 2^32 - 300·HZ)
	Tick uint64 // TICK_NSEC: (1e9 + HZ/2) / HZ
	HZ   uint64 // 0 when the measured tick matched no CONFIG_HZ value
}

// kernelHZ are the CONFIG_HZ values the kernel offers.
var kernelHZ = []uint64{24, 48, 100, 128, 250, 256, 300, 512, 1000, 1024, 1200}

// timebaseFrom derives the timebase from readings taken just after
// ticks began (in order): HZ from the first and last, snapped to the
// kernel's nearest CONFIG_HZ value when one is within 1 % (else the
// measured tick), and base from the earliest-bracketed tick of all.
func timebaseFrom(edges []ClockSample) Timebase {
	a, b := edges[0], edges[len(edges)-1]
	per := float64(b.MonoNs-a.MonoNs) / float64(b.Jiffies-a.Jiffies) // ns per tick, measured
	tick := uint64(math.Round(per))
	for _, h := range kernelHZ {
		if math.Abs(per-1e9/float64(h)) <= 0.01*1e9/float64(h) {
			tick = (1_000_000_000 + h/2) / h
			break
		}
	}
	return timebaseTick(edges, tick)
}

// timebaseTick is the timebase of a known tick length: base from the
// earliest-bracketed tick of edges; HZ the CONFIG_HZ value whose
// TICK_NSEC it is (0 if none).
func timebaseTick(edges []ClockSample, tick uint64) Timebase {
	tb := Timebase{Tick: tick}
	for _, h := range kernelHZ {
		if (1_000_000_000+h/2)/h == tick {
			tb.HZ = h
			break
		}
	}
	tb.Base = math.MaxInt64
	for _, e := range edges {
		tb.Base = min(tb.Base, int64(e.MonoNs)-int64(e.Jiffies*tb.Tick))
	}
	return tb
}

// NewTimebase derives the conversion from readings taken just after ticks
// began, in order (tests, tools).
func NewTimebase(edges ...ClockSample) (Timebase, error) {
	for i := 1; i < len(edges); i++ {
		if edges[i].Jiffies <= edges[i-1].Jiffies || edges[i].MonoNs <= edges[i-1].MonoNs {
			return Timebase{}, fmt.Errorf("readings out of order (%+v, %+v)", edges[i-1], edges[i])
		}
	}
	if len(edges) < 2 {
		return Timebase{}, errors.New("two readings at least")
	}
	return timebaseFrom(edges), nil
}

// MonoNs converts a timestamp in jiffies: the beginning of that tick.
func (t Timebase) MonoNs(j uint64) uint64 {
	return uint64(t.Base + int64(j*t.Tick))
}

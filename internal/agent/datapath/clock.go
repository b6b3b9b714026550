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
// clocks (LOW_RES_NSEC, which is TICK_NSEC): exact, so three brackets do;
// it spins for the first and sleeps to 1 ms before each of the next two
// (spinning through every tick cost the start 8 ms of CPU at HZ 250).
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
	clockSpan   = 60 * time.Millisecond // between the first and last bracket
	clockTight  = 50 * time.Microsecond // a bracket's width at most
	clockBudget = 2 * time.Second       // to find them, on a busy machine
	clockSpun   = 3                     // brackets found spinning before the sleep
	clockWake   = time.Millisecond      // with the tick known: wake this long before the next edge
)

func newClock(prog *ebpf.Program) (*Clock, error) {
	c := &Clock{prog: prog}
	tick := kernelTick()
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
			if tick > 2*uint64(clockWake) {
				// The next edge is a tick away: sleep to just before
				// it and spin from there. A late wake-up misses that
				// edge's bracket (the reading after the sleep is no
				// bracket's start) and the spin finds the next one.
				time.Sleep(time.Duration(tick) - clockWake)
				if n, err = c.sample(); err != nil {
					return nil, err
				}
				prev = n
				continue
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
	if tick != 0 {
		if len(edges) == 0 {
			return nil, fmt.Errorf("read the datapath clock: no clean tick edge in %v", clockBudget)
		}
		c.tb = timebaseTick(edges, tick)
		return c, nil
	}
	if len(edges) < 2 || edges[len(edges)-1].MonoNs-edges[0].MonoNs < uint64(clockSpan)/3 {
		return nil, fmt.Errorf("read the datapath clock: %d clean tick edges in %v, want 2 at least 20 ms apart", len(edges), clockBudget)
	}
	c.tb = timebaseFrom(edges)
	return c, nil
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

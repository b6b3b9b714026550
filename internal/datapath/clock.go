package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cilium/ebpf"
)

// Clock converts the datapath's timestamps, jiffies (bpf/clock.h), to
// CLOCK_MONOTONIC nanoseconds.
//
// The kernel advances jiffies from CLOCK_MONOTONIC: jiffy j begins at
// base + j·TICK_NSEC exactly (tick_do_update_jiffies64), so two numbers
// convert every timestamp, for the life of the boot: base, and the tick
// length. When loaded, Clock runs the flowlens_clock program (jiffies and
// the precise monotonic clock, read together) until jiffies moves twice:
// the first reading after each move is a tick's beginning, within the
// tick interrupt's latency and one program run (microseconds), and their
// distance gives HZ. The coarse clock would not do: it moves in steps of
// the timekeeper's accumulation interval, whose phase is not the ticks'.
type Clock struct {
	prog *ebpf.Program
	tb   Timebase
}

// clockSpin bounds the wait for two ticks (HZ is at least 24).
const clockSpin = 200 * time.Millisecond

func newClock(prog *ebpf.Program) (*Clock, error) {
	c := &Clock{prog: prog}
	var edges []ClockSample
	s, err := c.sample()
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(clockSpin)
	for len(edges) < 2 {
		n, err := c.sample()
		if err != nil {
			return nil, err
		}
		if n.Jiffies != s.Jiffies {
			edges = append(edges, n)
		}
		s = n
		if time.Now().After(deadline) {
			return nil, errors.New("read the datapath clock: jiffies did not move twice in 200 ms")
		}
	}
	tb, err := timebaseFrom(edges[0], edges[1])
	if err != nil {
		return nil, err
	}
	c.tb = tb
	return c, nil
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

// Timebase returns the conversion (fixed once loaded).
func (c *Clock) Timebase() (Timebase, error) { return c.tb, nil }

func (c *Clock) close() error { return c.prog.Close() }

// Timebase converts jiffies to CLOCK_MONOTONIC nanoseconds: jiffy j begins
// at Base + j·Tick.
type Timebase struct {
	Base int64  // ns; may be negative (jiffies start near 2^32 - 300·HZ)
	Tick uint64 // TICK_NSEC: (1e9 + HZ/2) / HZ
	HZ   uint64
}

// kernelHZ are the CONFIG_HZ values the kernel offers.
var kernelHZ = []uint64{24, 48, 100, 128, 250, 256, 300, 512, 1000, 1024, 1200}

// timebaseFrom derives the timebase from two readings taken at the
// beginning of ticks a and b (a earlier): their distance is whole ticks,
// give or take interrupt latency, so HZ is the kernel's nearest value.
func timebaseFrom(a, b ClockSample) (Timebase, error) {
	if b.Jiffies <= a.Jiffies || b.MonoNs <= a.MonoNs {
		return Timebase{}, fmt.Errorf("read the datapath clock: readings out of order (%+v, %+v)", a, b)
	}
	per := float64(b.MonoNs-a.MonoNs) / float64(b.Jiffies-a.Jiffies) // ns per tick, measured
	hz, best := uint64(0), math.Inf(1)
	for _, h := range kernelHZ {
		if d := math.Abs(per - 1e9/float64(h)); d < best {
			hz, best = h, d
		}
	}
	if best > 0.2*1e9/float64(hz) {
		return Timebase{}, fmt.Errorf("read the datapath clock: a tick of %.0f ns matches no kernel HZ", per)
	}
	tick := (1_000_000_000 + hz/2) / hz
	return Timebase{Base: int64(b.MonoNs) - int64(b.Jiffies*tick), Tick: tick, HZ: hz}, nil
}

// NewTimebase derives the conversion from two readings taken at the
// beginning of ticks (tests, tools).
func NewTimebase(a, b ClockSample) (Timebase, error) { return timebaseFrom(a, b) }

// MonoNs converts a timestamp in jiffies: the beginning of that tick.
func (t Timebase) MonoNs(j uint64) uint64 {
	return uint64(t.Base + int64(j*t.Tick))
}

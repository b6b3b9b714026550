package datapath

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// Clock converts the datapath's timestamps, jiffies (bpf/clock.h), to
// CLOCK_MONOTONIC nanoseconds. It reads both clocks together with the
// flowlens_clock program: once when loaded, and again for each Timebase
// (once per eviction).
type Clock struct {
	prog  *ebpf.Program
	mu    sync.Mutex
	first ClockSample
}

func newClock(prog *ebpf.Program) (*Clock, error) {
	c := &Clock{prog: prog}
	s, err := c.sample()
	if err != nil {
		return nil, err
	}
	c.first = s
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

// Timebase reads the clocks now and returns the conversion as it stands.
func (c *Clock) Timebase() (Timebase, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.sample()
	if err != nil {
		return Timebase{}, err
	}
	return Timebase{first: c.first, last: s}, nil
}

func (c *Clock) close() error { return c.prog.Close() }

// Timebase converts jiffies to CLOCK_MONOTONIC nanoseconds from two
// readings of both clocks. The kernel advances jiffies from CLOCK_MONOTONIC
// (one per tick, NTP adjustments included) and the coarse clock moves at
// the same ticks, so between two readings the clock advanced a whole number
// of equal ticks: their ratio is the tick length, exact once a tick has
// passed. Before that (both readings in one tick) every timestamp is the
// tick's own, the last reading's time.
type Timebase struct{ first, last ClockSample }

// NewTimebase is the conversion between two readings (tests, tools).
func NewTimebase(first, last ClockSample) Timebase { return Timebase{first, last} }

// MonoNs converts a timestamp in jiffies.
func (t Timebase) MonoNs(j uint64) uint64 {
	dj := t.last.Jiffies - t.first.Jiffies
	if dj == 0 || t.last.MonoNs < t.first.MonoNs {
		return t.last.MonoNs
	}
	tick := float64(t.last.MonoNs-t.first.MonoNs) / float64(dj)
	// Signed: a timestamp may be later than the last reading (a racing CPU).
	return uint64(int64(t.last.MonoNs) + int64(tick*float64(int64(j-t.last.Jiffies))))
}

// Last is the latest reading.
func (t Timebase) Last() ClockSample { return t.last }

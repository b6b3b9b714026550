package datapath_test

import (
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// A flow's timestamps (jiffies, bpf/clock.h) convert to the beginning of
// the tick its packet was counted in: at or before the packet, less than a
// tick before it.
func TestClockTimebase(t *testing.T) {
	needBPF(t)
	dp := load(t, 16)
	tb := dp.Clock.Timebase()
	if !slices.Contains([]uint64{24, 48, 100, 128, 250, 256, 300, 512, 1000, 1024, 1200}, tb.HZ) || tb.Tick != (1e9+tb.HZ/2)/tb.HZ {
		t.Fatalf("timebase %+v", tb)
	}
	// The tick is the kernel's own (its coarse clocks' resolution), not
	// a measurement that a late tick interrupt on a loaded VM skews.
	var res unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &res); err != nil || tb.Tick != uint64(res.Nano()) {
		t.Fatalf("timebase %+v, the kernel's tick %d ns (%v)", tb, res.Nano(), err)
	}
	frame := packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(packet.ProtoUDP, "10.0.0.1", "10.0.0.2", 8), packet.UDP(1, 2, 0))
	const runs = 20
	late := 0 // stamps more than a tick before their packet
	for i := 0; i < runs; i++ {
		before := monoNow()
		runPkt(t, dp, frame, 1)
		after := monoNow()
		got := flows(t, dp)
		if len(got) != 1 {
			t.Fatalf("%d flows", len(got))
		}
		stamp := int64(tb.MonoNs(got[0].v.LastSeen))
		// At or before the packet (which ran between before and after),
		// never after it (200 µs of slack for the tick interrupt's
		// latency), and at most a tick before it, unless the tick itself
		// was late: on a busy VM the vCPU that advances jiffies can be
		// descheduled for several ticks (seen: 6.5 ms at HZ 250, with two
		// test packages running). A late tick is allowed on a few runs and
		// up to 4 ticks; a wrong base would put every run off.
		slack := int64(200 * time.Microsecond)
		switch {
		case stamp > after+slack || stamp < before-4*int64(tb.Tick)-slack:
			t.Errorf("packet run in [%d, %d] ns, stamped %d (tick %d ns)", before, after, stamp, tb.Tick)
		case stamp < before-int64(tb.Tick)-slack:
			late++
		}
		time.Sleep(time.Duration(tb.Tick/3) + time.Duration(i)*97*time.Microsecond) // other phases of the tick
	}
	if late > runs/4 {
		t.Errorf("%d of %d stamps more than a tick before their packet", late, runs)
	}
}

func TestTimebaseArithmetic(t *testing.T) {
	// Readings at the beginning of ticks 1000 and 1250 of a HZ=250 kernel,
	// a few µs of interrupt latency apiece.
	tb, err := datapath.NewTimebase(datapath.ClockSample{Jiffies: 1000, MonoNs: 5_000_000_123},
		datapath.ClockSample{Jiffies: 1250, MonoNs: 6_000_003_456})
	if err != nil {
		t.Fatal(err)
	}
	if tb.HZ != 250 || tb.Tick != 4_000_000 {
		t.Fatalf("timebase %+v, want HZ 250", tb)
	}
	for _, c := range []struct{ j, want uint64 }{
		{1250, 6_000_000_123}, // base from the earlier bracket
		{1249, 5_996_000_123},
		{1251, 6_004_000_123},
		{0, 1_000_000_123},
	} {
		if got := tb.MonoNs(c.j); got != c.want {
			t.Errorf("MonoNs(%d) = %d, want %d", c.j, got, c.want)
		}
	}
	// HZ=300: TICK_NSEC is rounded, as the kernel does.
	if tb, err := datapath.NewTimebase(datapath.ClockSample{Jiffies: 10, MonoNs: 1e9}, datapath.ClockSample{Jiffies: 40, MonoNs: 1e9 + 100_000_040}); err != nil || tb.HZ != 300 || tb.Tick != 3_333_333 {
		t.Errorf("HZ 300: %+v %v", tb, err)
	}
	// Base comes from the earliest bracket: a late one (interrupt latency)
	// does not move it.
	tb, err = datapath.NewTimebase(datapath.ClockSample{Jiffies: 1000, MonoNs: 5_000_000_900},
		datapath.ClockSample{Jiffies: 1100, MonoNs: 5_400_000_100}, datapath.ClockSample{Jiffies: 1250, MonoNs: 6_000_000_700})
	if err != nil || tb.HZ != 250 || tb.MonoNs(1100) != 5_400_000_100 {
		t.Errorf("earliest bracket: %+v %v", tb, err)
	}
	// No CONFIG_HZ value near: the measured tick.
	if tb, err := datapath.NewTimebase(datapath.ClockSample{Jiffies: 0, MonoNs: 0}, datapath.ClockSample{Jiffies: 10, MonoNs: 70_000_000}); err != nil || tb.HZ != 0 || tb.Tick != 7_000_000 {
		t.Errorf("odd tick: %+v %v", tb, err)
	}
	if _, err := datapath.NewTimebase(datapath.ClockSample{Jiffies: 11, MonoNs: 1e9}, datapath.ClockSample{Jiffies: 10, MonoNs: 2e9}); err == nil {
		t.Error("readings out of order: no error")
	}
}

package datapath_test

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/datapath"
)

// The timebase maps the current tick to the current coarse monotonic time,
// after ticks have passed and before (one reading).
func TestClockTimebase(t *testing.T) {
	needBPF(t)
	dp := load(t, 16)
	check := func(when string) {
		t.Helper()
		tb, err := dp.Clock.Timebase()
		if err != nil {
			t.Fatal(err)
		}
		// The latest reading's own tick converts to its own time.
		last := tb.Last()
		if got := tb.MonoNs(last.Jiffies); got != last.MonoNs {
			t.Errorf("%s: tick %d -> %d ns, want the reading's %d", when, last.Jiffies, got, last.MonoNs)
		}
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts)
		if d := ts.Nano() - int64(last.MonoNs); d < 0 || d > int64(50*time.Millisecond) {
			t.Errorf("%s: the reading's monotonic time is %v from CLOCK_MONOTONIC_COARSE", when, time.Duration(d))
		}
	}
	check("at load")
	time.Sleep(300 * time.Millisecond)
	check("300 ms later")
	tb, _ := dp.Clock.Timebase()
	last := tb.Last()
	// 100 ticks earlier is 100 tick lengths earlier, whatever HZ is.
	tick := tb.MonoNs(last.Jiffies) - tb.MonoNs(last.Jiffies-1)
	if tick < uint64(time.Millisecond) || tick > uint64(41*time.Millisecond) { // HZ 1000 .. 24
		t.Fatalf("tick length %v", time.Duration(tick))
	}
	// (The coarse clock's tick is whole nanoseconds only on average.)
	if got, want := int64(tb.MonoNs(last.Jiffies-100)), int64(last.MonoNs-100*tick); got-want > 1000 || want-got > 1000 {
		t.Errorf("100 ticks back: %d, want %d ± 1 µs", got, want)
	}
}

func TestTimebaseArithmetic(t *testing.T) {
	first := datapath.ClockSample{Jiffies: 1000, MonoNs: 5_000_000_000}
	last := datapath.ClockSample{Jiffies: 1250, MonoNs: 6_000_000_000} // HZ=250: 4 ms a tick
	tb := datapath.NewTimebase(first, last)
	for _, c := range []struct{ j, want uint64 }{
		{1250, 6_000_000_000},
		{1249, 5_996_000_000},
		{1000, 5_000_000_000},
		{1251, 6_004_000_000}, // a racing CPU's later tick
		{0, 1_000_000_000},
	} {
		if got := tb.MonoNs(c.j); got != c.want {
			t.Errorf("MonoNs(%d) = %d, want %d", c.j, got, c.want)
		}
	}
	// One reading only (no tick between them): every stamp is its time.
	if got := datapath.NewTimebase(last, last).MonoNs(1200); got != last.MonoNs {
		t.Errorf("single reading: %d, want %d", got, last.MonoNs)
	}
}

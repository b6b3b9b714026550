//go:build soak

package soak

import (
	"math"
	"testing"
)

// A line is fitted exactly; its interval is (near) zero and it is flat only
// when its hourly change is within the noise given.
func TestFitLine(t *testing.T) {
	var ts, ys []float64
	for i := range 271 { // 45 min of samples every 10 s
		ts = append(ts, float64(i*10))
		ys = append(ys, 100+float64(i*10)/3600*12) // +12 per hour
	}
	tr, err := Fit(ts, ys)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(tr.Slope-12) > 1e-9 || tr.CI > 1e-6 || tr.N != 271 {
		t.Fatalf("slope %v ± %v over %d samples, want 12 ± 0 over 271", tr.Slope, tr.CI, tr.N)
	}
	if tr.Flat(10) || !tr.Flat(12) {
		t.Fatalf("a 12/h slope: flat under noise 10 = %v (want false), under 12 = %v (want true)", tr.Flat(10), tr.Flat(12))
	}
}

// A flat series with alternating noise has an interval containing zero; a
// leak of one object every 100 samples (about 3.6 an hour) in the same noise
// has a slope the interval excludes.
func TestFitNoiseAndLeak(t *testing.T) {
	var ts, flat, step []float64
	for i := range 270 {
		ts = append(ts, float64(i*10))
		flat = append(flat, 50+float64(i%2)*2-1)
		step = append(step, 50+float64(i/100)+float64(i%2)*2-1)
	}
	tr, err := Fit(ts, flat)
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Flat(0) || math.Abs(tr.Slope) > tr.CI {
		t.Fatalf("alternating noise: slope %v ± %v, want an interval containing 0", tr.Slope, tr.CI)
	}
	tr, err = Fit(ts, step)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Flat(0) {
		t.Fatalf("a leak of 3.6/h: slope %v ± %v judged flat", tr.Slope, tr.CI)
	}
	if _, err := Fit(ts[:3], step[:3]); err == nil {
		t.Fatal("three samples fitted, want an error")
	}
}

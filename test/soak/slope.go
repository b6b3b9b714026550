//go:build soak

package soak

import (
	"fmt"
	"math"
)

// Trend is a series' least-squares line over a window of samples.
type Trend struct {
	N        int     // samples in the window
	NEff     float64 // effective sample size after the lag-1 autocorrelation correction
	Slope    float64 // units per hour
	CI       float64 // half-width of the slope's 95% confidence interval, units per hour
	First    float64 // the window's first sample
	Last     float64 // its last sample
	Mean     float64
	Residual float64 // standard deviation of the residuals
}

// Fit is the ordinary least-squares slope of y over t (seconds), in units
// per hour, with a 95% confidence interval. Samples taken every 10 s are
// autocorrelated (RSS moves with GC cycles, a count with what is in flight),
// which makes the textbook interval too narrow; the standard error is
// widened by the effective sample size n(1-r)/(1+r), r the residuals' lag-1
// autocorrelation (r <= 0 leaves it at n).
func Fit(t, y []float64) (Trend, error) {
	n := len(t)
	if n != len(y) || n < 4 {
		return Trend{}, fmt.Errorf("fit: need at least 4 paired samples, have %d and %d", len(t), len(y))
	}
	var mt, my float64
	for i := range t {
		mt += t[i]
		my += y[i]
	}
	mt /= float64(n)
	my /= float64(n)
	var sxx, sxy float64
	for i := range t {
		sxx += (t[i] - mt) * (t[i] - mt)
		sxy += (t[i] - mt) * (y[i] - my)
	}
	if sxx == 0 {
		return Trend{}, fmt.Errorf("fit: all samples at one time")
	}
	b := sxy / sxx
	res := make([]float64, n)
	var sse float64
	for i := range t {
		res[i] = y[i] - (my + b*(t[i]-mt))
		sse += res[i] * res[i]
	}
	var c0, c1 float64
	for i := range res {
		c0 += res[i] * res[i]
		if i > 0 {
			c1 += res[i] * res[i-1]
		}
	}
	r := 0.0
	if c0 > 0 {
		r = c1 / c0
	}
	nEff := float64(n)
	if r > 0 {
		nEff = float64(n) * (1 - r) / (1 + r)
	}
	if nEff < 3 {
		nEff = 3
	}
	se := math.Sqrt(sse/float64(n-2)/sxx) * math.Sqrt(float64(n)/nEff)
	return Trend{
		N: n, NEff: nEff,
		Slope: b * 3600, CI: tQuantile975(nEff-2) * se * 3600,
		First: y[0], Last: y[n-1], Mean: my,
		Residual: math.Sqrt(sse / float64(n-2)),
	}, nil
}

// Flat says whether a trend is flat: its 95% interval contains zero, or the
// change it projects over an hour is within noise (|slope| <= noise per hour).
func (tr Trend) Flat(noise float64) bool {
	return math.Abs(tr.Slope) <= tr.CI || math.Abs(tr.Slope) <= noise
}

// tQuantile975 is Student's t 97.5% quantile for df degrees of freedom
// (df >= 1; fractional df round down, which widens the interval).
func tQuantile975(df float64) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	d := int(df)
	switch {
	case d < 1:
		d = 1
	case d > len(table):
		if d > 120 {
			return 1.960
		}
		if d > 60 {
			return 1.980
		}
		if d > 40 {
			return 2.000
		}
		return 2.021
	}
	return table[d-1]
}

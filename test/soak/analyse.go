//go:build soak

package soak

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// A gate is a series that must be flat over the last three quarters of
// the run, and its noise: the change per hour below which a slope counts as
// flat even when its interval excludes zero. The per-event work of the soak
// sets the scale: it creates about 1,200 namespaces (2,400 interfaces),
// 36,000 TCP connections and 360,000 UDP flows an hour, so a leak of one
// goroutine, file or BPF object per namespace, interface or connection
// grows by 1,200 an hour or more, hundreds of times the noise allowed
// (5 goroutines or files, 1 BPF object). Memory: 2 MiB or 5% of the mean,
// whichever is larger, an hour: the Go heap's size moves by more than that
// from one GC cycle to the next, and a leak of 1 KiB per namespace or 64
// bytes per connection (1.2 and 2.2 MiB an hour) is near it, so smaller leaks
// than that need a longer run to see.
type gate struct {
	col   string
	noise func(mean float64) float64 // units per hour
}

var gates = []gate{
	{"agent_rss_kib", memNoise}, {"collector_rss_kib", memNoise},
	{"agent_goroutines", fixed(5)}, {"collector_goroutines", fixed(5)},
	{"agent_fds", fixed(5)}, {"collector_fds", fixed(5)},
	{"agent_bpf_progs", fixed(1)}, {"agent_bpf_maps", fixed(1)}, {"agent_bpf_links", fixed(1)}, {"agent_bpf_alive", fixed(1)},
}

// reported: fitted and listed, not gated (other work on the host moves the
// system-wide BPF counts; the rest describe the load).
var reported = []string{"sys_bpf_progs", "sys_bpf_maps", "agent_exported_flows", "collector_received_flows", "agent_partial_flows", "netns_alive"}

func memNoise(mean float64) float64 { return math.Max(2048, 0.05*mean) }

func fixed(n float64) func(float64) float64 { return func(float64) float64 { return n } }

// Analyse fits every gated and reported series over the samples taken after
// the first quarter of dur, and returns a table and whether every gate
// is flat. cols names rows' columns; elapsed_s is the time.
func Analyse(cols []string, rows [][]float64, dur time.Duration) (string, bool) {
	idx := map[string]int{}
	for i, c := range cols {
		idx[c] = i
	}
	from := dur.Seconds() / 4
	var ts []float64
	var win [][]float64
	for _, r := range rows {
		if r[idx["elapsed_s"]] >= from {
			ts = append(ts, r[idx["elapsed_s"]])
			win = append(win, r)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d samples, window %.0f s to %.0f s (%d samples)\n", len(rows), from, last(ts), len(ts))
	fmt.Fprintf(&b, "%-26s %12s %12s %12s %14s %12s %12s  %s\n", "series", "run start", "window start", "end", "slope /h", "95% CI ±", "noise /h", "verdict")
	ok := true
	line := func(col string, noise float64, gated bool) {
		i, have := idx[col]
		if !have {
			fmt.Fprintf(&b, "%-26s missing\n", col)
			ok = false
			return
		}
		ys := make([]float64, len(win))
		for k, r := range win {
			ys[k] = r[i]
		}
		tr, err := Fit(ts, ys)
		if err != nil {
			fmt.Fprintf(&b, "%-26s %v\n", col, err)
			ok = ok && !gated
			return
		}
		if noise < 0 {
			noise = 0
		}
		verdict := "reported"
		if gated {
			verdict = "flat"
			if !tr.Flat(noise) {
				verdict = "NOT FLAT"
				ok = false
			}
		}
		fmt.Fprintf(&b, "%-26s %12.0f %12.0f %12.0f %+14.2f %12.2f %12.0f  %s\n", col, rows[0][i], tr.First, tr.Last, tr.Slope, tr.CI, noise, verdict)
	}
	for _, g := range gates {
		mean := 0.0
		if i, have := idx[g.col]; have {
			for _, r := range win {
				mean += r[i]
			}
			mean /= math.Max(1, float64(len(win)))
		}
		line(g.col, g.noise(mean), true)
	}
	for _, c := range reported {
		line(c, -1, false)
	}
	return b.String(), ok
}

func last(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return v[len(v)-1]
}

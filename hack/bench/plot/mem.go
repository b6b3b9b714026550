package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Issue #33's memory targets, in MB (10^6 bytes): the light loads' peak
// and the peak at 300,000 new flows/s. The plot is in MiB, as
// hack/bench/mem prints.
const (
	memTargetLightMB = 22
	memTargetFloodMB = 30
)

// memFloodFile is the new-flow flood's runs beside mem.json (make
// bench-mem BENCH_MEM_JSON=mem-flood.json ...): a separate run of the
// tool, so a separate file; plotMem draws both.
const memFloodFile = "mem-flood.json"

// memRun is one run in mem.json (hack/bench/mem -out, its runResult:
// Go's field names, no tags): the fields drawn here, in MiB.
type memRun struct {
	Agent, Workload, Traffic string
	Round                    int
	Load, Drained            memReading
}

type memReading struct {
	RSS, HWM                float64
	BinText, BinRO, BinData float64
	Anon, BPFMaps, Other    float64
}

// workload is the run's row: the tool's workload name, with udp split
// into the cycled flows and the flood of new flows (-udp-flows 0), which
// the tool names alike and tells apart only in its traffic line.
func (r memRun) workload() string {
	if r.Workload == "udp" && strings.Contains(r.Traffic, "every frame a new flow") {
		return "flood"
	}
	return r.Workload
}

// peak is the run's VmHWM: after the drain if the run had one (the
// peak only grows), else at the end of the traffic; and the reading
// whose origins it is split by.
func (r memRun) peak() (float64, memReading) {
	if r.Drained.HWM > 0 {
		return r.Drained.HWM, r.Drained
	}
	return r.Load.HWM, r.Load
}

// memSummary is one bar: an agent's runs of one workload. Peak is VmHWM
// over the rounds; File (the binary's mapped pages), Anon and Rest (BPF
// map mmaps and other mappings) are the medians of the reading the peak
// is taken at, so their sum is the RSS then, at or under the peak.
type memSummary struct {
	Workload, Agent  string
	Peak             spread
	File, Anon, Rest float64
}

// memWorkloads orders the rows: the light loads, then the heavy ones.
var memWorkloads = []string{"idle", "keepalive", "tcp", "newconn", "udp", "flood"}

var memWorkloadTitle = map[string]string{
	"idle":      "idle",
	"keepalive": "keep-alive",
	"tcp":       "TCP stream",
	"newconn":   "conn./request",
	"udp":       "UDP cycled",
	"flood":     "new-flow flood",
}

// memSummaries is one summary per workload and agent, in memWorkloads'
// order, the agents in the order the runs name them first.
func memSummaries(runs []memRun) []memSummary {
	var agents []string
	type key struct{ w, a string }
	by := map[key][]memRun{}
	for _, r := range runs {
		if !slices.Contains(agents, r.Agent) {
			agents = append(agents, r.Agent)
		}
		k := key{r.workload(), r.Agent}
		by[k] = append(by[k], r)
	}
	workloads := slices.Clone(memWorkloads)
	for k := range by {
		if !slices.Contains(workloads, k.w) {
			workloads = append(workloads, k.w)
		}
	}
	var sums []memSummary
	for _, w := range workloads {
		for _, a := range agents {
			rs := by[key{w, a}]
			if len(rs) == 0 {
				continue
			}
			var peak, file, anon, rest []float64
			for _, r := range rs {
				hwm, at := r.peak()
				peak = append(peak, hwm)
				file = append(file, at.BinText+at.BinRO+at.BinData)
				anon = append(anon, at.Anon)
				rest = append(rest, at.BPFMaps+at.Other)
			}
			sums = append(sums, memSummary{Workload: w, Agent: a, Peak: spreadOf(peak),
				File: median(file), Anon: median(anon), Rest: median(rest)})
		}
	}
	return sums
}

func readMemRuns(src string) ([]memRun, error) {
	var runs []memRun
	for _, f := range []string{src, filepath.Join(filepath.Dir(src), memFloodFile)} {
		b, err := os.ReadFile(f)
		if f != src && errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var rs []memRun
		if err := json.Unmarshal(b, &rs); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
		runs = append(runs, rs...)
	}
	return runs, nil
}

// plotMem draws bench-mem.png from mem.json and mem-flood.json beside
// it: per workload one bar per agent, the median peak RSS (VmHWM) split
// by origin at the reading it is taken at (the binary's file-backed
// pages, anonymous memory, the rest, and how far the peak stood above
// that reading), whiskers min..max over the rounds, and issue #33's
// targets over the workloads they apply to.
func plotMem(src, outDir string) error {
	runs, err := readMemRuns(src)
	if err != nil {
		return err
	}
	sums := memSummaries(runs)
	if len(sums) == 0 {
		return fmt.Errorf("%w: no runs", errNoData)
	}
	var agents []string
	for _, s := range sums {
		if !slices.Contains(agents, s.Agent) {
			agents = append(agents, s.Agent)
		}
	}
	short := agentNames(agents)
	// One slot per bar, an empty slot between workloads.
	var names []string
	var file, anon, rest, above plotter.Values
	var tops plotter.XYs
	var topLabels []string
	whiskers := &barMarks{Style: draw.LineStyle{Color: color.Black, Width: vg.Points(1)}}
	span := map[string][2]float64{} // workload -> first and last slot
	hi := 0.0
	for i, s := range sums {
		if i > 0 && sums[i-1].Workload != s.Workload {
			names = append(names, "")
			file, anon, rest, above = append(file, 0), append(anon, 0), append(rest, 0), append(above, 0)
		}
		x := float64(len(names))
		name := memWorkloadTitle[s.Workload]
		if name == "" {
			name = s.Workload
		}
		if len(agents) > 1 {
			name += "\n" + short[s.Agent]
		}
		names = append(names, name)
		file, anon, rest = append(file, s.File), append(anon, s.Anon), append(rest, s.Rest)
		above = append(above, max(0, s.Peak.Med-(s.File+s.Anon+s.Rest)))
		whiskers.whisker(x, 0, s.Peak, vg.Points(8))
		top := max(s.Peak.Med, s.File+s.Anon+s.Rest)
		tops = append(tops, plotter.XY{X: x, Y: 0})
		topLabels = append(topLabels, fmt.Sprintf("%.1f", s.Peak.Med))
		sp, ok := span[s.Workload]
		if !ok {
			sp[0] = x
		}
		sp[1] = x
		span[s.Workload] = sp
		hi = max(hi, s.Peak.Max, top)
	}
	p := plot.New()
	p.Title.Text = "The agent's peak RSS (VmHWM) by origin: median, whiskers min..max (make bench-mem)"
	p.Y.Label.Text = "MiB"
	w := vg.Points(26)
	var prev *plotter.BarChart
	for i, part := range []struct {
		v     plotter.Values
		label string
		c     color.Color
	}{
		{file, "the binary's file-backed pages (text, rodata, data)", color.RGBA{R: 70, G: 110, B: 180, A: 255}},
		{anon, "anonymous (Go heap, stacks, runtime)", color.RGBA{R: 230, G: 140, B: 50, A: 255}},
		{rest, "BPF map mmaps and other mappings", color.RGBA{R: 120, G: 170, B: 90, A: 255}},
		{above, "peak (VmHWM) above the RSS at that reading", color.Gray{Y: 200}},
	} {
		b, err := plotter.NewBarChart(part.v, w)
		if err != nil {
			return err
		}
		b.Color = part.c
		b.LineStyle.Width = 0
		if prev != nil {
			b.StackOn(prev)
		}
		prev = b
		p.Add(b)
		if i < 3 || slices.ContainsFunc(above, func(v float64) bool { return v > 0.05 }) {
			p.Legend.Add(part.label, b)
		}
	}
	p.Add(whiskers)
	// The median peaks are written at the foot of the bars, clear of the
	// whiskers and the target lines.
	labels, err := barLabels(tops, topLabels, 0)
	if err != nil {
		return err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Color = color.White
	}
	p.Add(labels)
	// The targets over the workloads they are set for.
	for _, t := range []struct {
		mb        float64
		workloads []string
		label     string
	}{
		{memTargetLightMB, []string{"idle", "keepalive", "tcp"}, "target: 22 MB (21.0 MiB), light loads (issue #33)"},
		{memTargetFloodMB, []string{"flood"}, "target: 30 MB (28.6 MiB), 300,000 new flows/s (issue #33)"},
	} {
		y := t.mb * 1e6 / (1 << 20)
		var line *plotter.Line
		for _, wl := range t.workloads {
			sp, ok := span[wl]
			if !ok {
				continue
			}
			line, err = plotter.NewLine(plotter.XYs{{X: sp[0] - 0.45, Y: y}, {X: sp[1] + 0.45, Y: y}})
			if err != nil {
				return err
			}
			line.Color = color.RGBA{R: 200, A: 255}
			line.Width = vg.Points(1.5)
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(line)
			hi = max(hi, y)
		}
		if line != nil {
			p.Legend.Add(t.label, line)
		}
	}
	p.Add(plotter.NewGrid())
	p.NominalX(names...)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Min = 0
	p.Y.Max = hi * 1.6 // room for the legend
	p.X.Label.Text = "the median peak at the foot of each bar"
	p.Y.Tick.Marker = plot.TickerFunc(linearTicks)
	path := filepath.Join(outDir, "bench-mem.png")
	width := max(8*vg.Inch, vg.Length(len(names))*0.95*vg.Inch)
	if err := p.Save(width, 6*vg.Inch, path); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

// agentNames are short names for agent paths (hack/bench/mem's and
// hack/bench/startup's -agent): what tells them apart, the path
// components they share at both ends dropped (/x/base/bin/flowlens-agent
// and /x/head/bin/flowlens-agent: base, head); a path alone is its base
// name. A +K=V environment suffix stays.
func agentNames(agents []string) map[string]string {
	names := map[string]string{}
	split := make([][]string, len(agents))
	env := make([]string, len(agents))
	for i, a := range agents {
		path, e, ok := strings.Cut(a, "+")
		if ok {
			env[i] = "+" + e
		}
		split[i] = strings.Split(filepath.Clean(path), "/")
	}
	pre, suf := 0, 0
	if len(agents) > 1 {
		for same(split, func(s []string) (string, bool) { return at(s, pre) }) {
			pre++
		}
		for same(split, func(s []string) (string, bool) { return at(s, len(s)-1-suf) }) {
			suf++
		}
	}
	for i, a := range agents {
		s := split[i]
		var n string
		if pre+suf < len(s) {
			n = strings.Join(s[pre:len(s)-suf], "/")
		}
		if n == "" {
			n = s[len(s)-1]
		}
		names[a] = n + env[i]
	}
	return names
}

func at(s []string, i int) (string, bool) {
	if i < 0 || i >= len(s) {
		return "", false
	}
	return s[i], true
}

// same: every path has a component at f's index and all are equal.
func same(paths [][]string, f func([]string) (string, bool)) bool {
	first, ok := f(paths[0])
	if !ok {
		return false
	}
	for _, p := range paths[1:] {
		if v, ok := f(p); !ok || v != first {
			return false
		}
	}
	return true
}

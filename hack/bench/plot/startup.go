package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Issue #33's start-up targets: attached within this wall time and CPU.
const (
	startupTargetWallS = 0.3
	startupTargetCPUS  = 0.15
)

// startupRun is one run in startup.json (make bench-startup,
// hack/bench/startup -out).
type startupRun struct {
	Agent string  `json:"agent"`
	Round int     `json:"round"`
	WallS float64 `json:"wall_s"`
	CPUS  float64 `json:"cpu_s"`
}

// startupSummary is one agent's runs: wall and CPU seconds from exec to
// attached, medians with min..max.
type startupSummary struct {
	Agent     string
	Wall, CPU spread
}

// startupSummaries is one summary per agent, in the order the runs name
// them first.
func startupSummaries(runs []startupRun) []startupSummary {
	var agents []string
	wall, cpu := map[string][]float64{}, map[string][]float64{}
	for _, r := range runs {
		if !slices.Contains(agents, r.Agent) {
			agents = append(agents, r.Agent)
		}
		wall[r.Agent] = append(wall[r.Agent], r.WallS)
		cpu[r.Agent] = append(cpu[r.Agent], r.CPUS)
	}
	var sums []startupSummary
	for _, a := range agents {
		sums = append(sums, startupSummary{a, spreadOf(wall[a]), spreadOf(cpu[a])})
	}
	return sums
}

// plotStartup draws bench-startup.png: per agent the wall and the CPU
// seconds from exec to attached, medians with whiskers min..max, and
// issue #33's targets over each.
func plotStartup(src, outDir string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var runs []startupRun
	if err := json.Unmarshal(b, &runs); err != nil {
		return err
	}
	sums := startupSummaries(runs)
	if len(sums) == 0 {
		return fmt.Errorf("%w: no runs", errNoData)
	}
	agents := make([]string, len(sums))
	for i, s := range sums {
		agents[i] = s.Agent
	}
	short := agentNames(agents)
	n := len(sums)
	w := vg.Points(34)
	p := plot.New()
	p.Title.Text = "The agent's start, exec to attached: median, whiskers min..max (make bench-startup)"
	p.Y.Label.Text = "seconds"
	whiskers := &barMarks{Style: draw.LineStyle{Color: color.Black, Width: vg.Points(1)}}
	var tops plotter.XYs
	var topLabels []string
	hi := startupTargetWallS
	for i, s := range sums {
		vals := plotter.Values{s.Wall.Med, s.CPU.Med}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		off := (vg.Length(i) - vg.Length(n-1)/2) * w
		bars.Offset = off
		p.Add(bars)
		p.Legend.Add(fmt.Sprintf("%s (n=%d)", short[s.Agent], s.Wall.N), bars)
		for x, sp := range []spread{s.Wall, s.CPU} {
			whiskers.whisker(float64(x), off, sp, vg.Points(8))
			tops = append(tops, plotter.XY{X: float64(x), Y: 0})
			topLabels = append(topLabels, fmt.Sprintf("%.3f", sp.Med))
			hi = max(hi, sp.Max)
		}
	}
	p.Add(whiskers)
	// The medians are written at the foot of each bar, clear of the
	// whiskers and the target lines: one labels set per agent, each offset
	// like its bars.
	for i := range sums {
		off := (vg.Length(i) - vg.Length(n-1)/2) * w
		l, err := barLabels(tops[2*i:2*i+2], topLabels[2*i:2*i+2], off)
		if err != nil {
			return err
		}
		p.Add(l)
	}
	half := float64(n)*float64(w)/2 + 6 // points either side of a group's centre
	targets := &barMarks{Style: draw.LineStyle{Color: color.RGBA{R: 200, A: 255}, Width: vg.Points(1.5),
		Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}}
	for x, y := range []float64{startupTargetWallS, startupTargetCPUS} {
		targets.Marks = append(targets.Marks, barMark{X: float64(x), DX0: -vg.Length(half), DX1: vg.Length(half), Y0: y, Y1: y})
	}
	p.Add(targets)
	p.Legend.Add(fmt.Sprintf("targets: %.1f s wall, %.2f CPU s (issue #33)", startupTargetWallS, startupTargetCPUS), targets)
	p.Add(plotter.NewGrid())
	p.NominalX("wall time to attached", "CPU time (user + system) to attached")
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Min = 0
	p.Y.Max = hi * 1.5 // room for the legend
	path := filepath.Join(outDir, "bench-startup.png")
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

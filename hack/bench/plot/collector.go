package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// collectorRun is one run of one target in collector.json (make
// bench-collector, hack/bench/collector): the fields drawn here.
type collectorRun struct {
	Target     string  `json:"target"`
	PacedCPUNs float64 `json:"paced_cpu_ns"`
	MaxCPUNs   float64 `json:"max_cpu_ns"`
}

// plotCollector draws bench-collector.png: each target's CPU per flow
// (median, min..max over the runs), paced and unpaced, flowlogs-pipeline's
// median times 0.25 (issue #33's target) marked.
func plotCollector(src, outDir string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var runs []collectorRun
	if err := json.Unmarshal(b, &runs); err != nil {
		return err
	}
	var targets []string
	by := map[string][2][]float64{}
	for _, r := range runs {
		if _, ok := by[r.Target]; !ok {
			targets = append(targets, r.Target)
		}
		v := by[r.Target]
		v[0], v[1] = append(v[0], r.PacedCPUNs/1000), append(v[1], r.MaxCPUNs/1000)
		by[r.Target] = v
	}
	if len(targets) == 0 {
		return fmt.Errorf("%w: no runs", errNoData)
	}
	slices.Reverse(targets) // the first target at the top
	p := plot.New()
	p.Title.Text = "Collector CPU per flow on one core: flowlens-collector vs flowlogs-pipeline (median, min..max)"
	p.X.Label.Text = "µs of CPU per flow"
	p.X.Min = 0
	// One row per target and phase (paced above unpaced), a bar chart per
	// phase with zeros in the other phase's rows.
	rows := 2 * len(targets)
	names := make([]string, rows)
	var xMax float64
	for k, phase := range []string{"unpaced", "paced"} {
		meds := make(plotter.Values, rows)
		var pts plotter.XYs
		var spread plotter.XErrors
		for i, t := range targets {
			v := by[t][1-k]
			row := 2*i + k
			med := median(v)
			meds[row], names[row] = med, t+", "+phase
			lo, hi := slices.Min(v), slices.Max(v)
			xMax = max(xMax, hi)
			pts = append(pts, plotter.XY{X: med, Y: float64(row)})
			spread = append(spread, struct{ Low, High float64 }{med - lo, hi - med})
		}
		bars, err := plotter.NewBarChart(meds, vg.Points(14))
		if err != nil {
			return err
		}
		bars.Horizontal = true
		bars.LineStyle.Width = 0
		bars.Color = []color.Color{color.RGBA{R: 230, G: 140, B: 50, A: 255}, color.RGBA{R: 70, G: 110, B: 180, A: 255}}[k]
		p.Add(bars)
		errs, err := plotter.NewXErrorBars(struct {
			plotter.XYer
			plotter.XErrorer
		}{pts, spread})
		if err != nil {
			return err
		}
		p.Add(errs)
	}
	p.NominalY(names...)
	if v, ok := by["flp"]; ok {
		x := 0.25 * median(v[0])
		line, err := plotter.NewLine(plotter.XYs{{X: x, Y: -0.5}, {X: x, Y: float64(rows) - 0.5}})
		if err != nil {
			return err
		}
		line.Color = color.RGBA{R: 200, A: 255}
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
		p.Legend.Add("target: 0.25 × flowlogs-pipeline, paced (issue #33)", line)
	}
	p.Legend.Top = true
	step := 2.0
	p.X.Max = math.Ceil(xMax/step) * step
	var ticks []plot.Tick
	for x := 0.0; x <= p.X.Max+1e-9; x += step {
		ticks = append(ticks, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', 0, 64)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Add(plotter.NewGrid())
	path := filepath.Join(outDir, "bench-collector.png")
	if err := p.Save(9*vg.Inch, vg.Length(1.2+0.32*float64(rows))*vg.Inch, path); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

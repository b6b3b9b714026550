package main

import (
	"bufio"
	"cmp"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// exporterLine is a BenchmarkEviction result of an exporter's package
// (exportertest.Run): the sub-benchmark, then its metrics.
var exporterLine = regexp.MustCompile(`^BenchmarkEviction(/\S+?)?(-\d+)?\s+\d+\s+(.*)$`)

// exporterSample is one configuration's cpu-ns/flow over go.txt's runs.
type exporterSample struct {
	label string
	cpu   []float64
}

// readExporters reads go.txt's BenchmarkEviction lines of the packages
// under internal/agent/exporter (a "pkg:" line names the package of the lines
// after it), keyed "exporter sub-benchmark values", in first-seen order.
func readExporters(src string) ([]*exporterSample, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*exporterSample
	byLabel := map[string]*exporterSample{}
	pkg := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = ""
			if rest, ok := strings.CutPrefix(p, "github.com/flowlens/flowlens/internal/agent/exporter/"); ok {
				pkg = rest
			}
			continue
		}
		m := exporterLine.FindStringSubmatch(line)
		if m == nil || pkg == "" {
			continue
		}
		label := pkg
		for _, part := range strings.Split(strings.TrimPrefix(m[1], "/"), "/") {
			if _, v, ok := strings.Cut(part, "="); ok && v != "none" {
				label += " " + v
			}
		}
		fields := strings.Fields(m[3])
		for j := 0; j+1 < len(fields); j += 2 {
			if fields[j+1] != "cpu-ns/flow" {
				continue
			}
			v, err := strconv.ParseFloat(fields[j], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", line, err)
			}
			s := byLabel[label]
			if s == nil {
				s = &exporterSample{label: label}
				byLabel[label] = s
				out = append(out, s)
			}
			s.cpu = append(s.cpu, v)
		}
	}
	return out, sc.Err()
}

// plotExporters draws bench-exporters-per-flow.png: each exporter
// configuration's CPU per flow (median, and the min..max of the runs) at
// 100k flows per eviction, against issue #16's 1 µs target.
func plotExporters(src, outDir string) error {
	samples, err := readExporters(src)
	if err != nil {
		return err
	}
	if len(samples) == 0 {
		return fmt.Errorf("%w: no BenchmarkEviction cpu-ns/flow lines of internal/agent/exporter packages", errNoData)
	}
	// Cheapest at the bottom.
	slices.SortStableFunc(samples, func(a, b *exporterSample) int {
		return cmp.Compare(median(b.cpu), median(a.cpu))
	})
	p := plot.New()
	p.Title.Text = "Exporters: agent CPU per flow at 100k flows per eviction (median, min..max)"
	p.X.Label.Text = "µs of CPU per flow"
	p.X.Min = 0
	var xMax float64
	meds := make(plotter.Values, len(samples))
	names := make([]string, len(samples))
	var spread plotter.XErrors
	var pts plotter.XYs
	for i, s := range samples {
		med := median(s.cpu) / 1000
		meds[i], names[i] = med, s.label
		lo, hi := slices.Min(s.cpu)/1000, slices.Max(s.cpu)/1000
		xMax = max(xMax, hi)
		pts = append(pts, plotter.XY{X: med, Y: float64(i)})
		spread = append(spread, struct{ Low, High float64 }{med - lo, hi - med})
	}
	bars, err := plotter.NewBarChart(meds, vg.Points(14))
	if err != nil {
		return err
	}
	bars.Horizontal = true
	bars.Color = color.RGBA{R: 70, G: 110, B: 180, A: 255}
	bars.LineStyle.Width = 0
	p.Add(bars)
	errs, err := plotter.NewXErrorBars(struct {
		plotter.XYer
		plotter.XErrorer
	}{pts, spread})
	if err != nil {
		return err
	}
	p.Add(errs)
	p.NominalY(names...)
	// A tick every 0.25 µs, past the longest error bar.
	p.X.Max = math.Ceil(xMax*4) / 4
	var ticks []plot.Tick
	for x := 0.0; x <= p.X.Max+1e-9; x += 0.25 {
		ticks = append(ticks, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', 2, 64)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	line, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.5}, {X: 1, Y: float64(len(samples)) - 0.5}})
	if err != nil {
		return err
	}
	line.Color = color.RGBA{R: 200, A: 255}
	line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(line)
	p.Legend.Add("target: 1 µs per flow (issue #16)", line)
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	path := filepath.Join(outDir, "bench-exporters-per-flow.png")
	if err := p.Save(9*vg.Inch, vg.Length(1.2+0.32*float64(len(samples)))*vg.Inch, path); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

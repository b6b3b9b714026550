// Command plot draws docs/img/*.png from the benchmark results (make
// bench-plots): bpf.json from make bench-bpf, go.txt from make bench,
// live.json from make bench-live, live-sidebyside.json from make
// bench-live PEER=1, soak.csv from make soak (soak.png), collector.json
// from make bench-collector (bench-collector.png), mem.json from make
// bench-mem with the new-flow flood's mem-flood.json beside it
// (bench-mem.png) and startup.json from make bench-startup
// (bench-startup.png). A missing input skips its plots; go.txt gives the
// eviction plot and the exporters' (bench-exporters-per-flow.png).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
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
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

func main() {
	in := flag.String("in", "", "directory with bpf.json, go.txt, live.json, live-sidebyside.json, soak.csv, collector.json, mem.json, mem-flood.json, startup.json")
	out := flag.String("out", "docs/img", "where to write the PNGs")
	before := flag.String("before", "", "a bpf.json of an earlier build: also draw bench-bpf-before-after.png against -in's bpf.json")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fatal(err)
	}
	if *before != "" {
		if err := plotBeforeAfter(*before, filepath.Join(*in, "bpf.json"), *out); err != nil {
			fatal(fmt.Errorf("before/after: %w", err))
		}
	}
	did := 0
	for _, p := range []struct {
		file string
		fn   func(string, string) error
	}{
		{"bpf.json", plotDatapath},
		{"go.txt", plotEviction},
		{"go.txt", plotExporters},
		{"live.json", plotLatency},
		{"live-sidebyside.json", plotSideBySide},
		{"soak.csv", plotSoak},
		{"collector.json", plotCollector},
		{"mem.json", plotMem},
		{"startup.json", plotStartup},
	} {
		src := filepath.Join(*in, p.file)
		if _, err := os.Stat(src); err != nil {
			fmt.Fprintf(os.Stderr, "skipping %s: %v\n", p.file, err)
			continue
		}
		if err := p.fn(src, *out); errors.Is(err, errNoData) {
			fmt.Fprintf(os.Stderr, "skipping a plot of %s: %v\n", p.file, err)
			continue
		} else if err != nil {
			fatal(fmt.Errorf("%s: %w", p.file, err))
		}
		did++
	}
	if did == 0 {
		fatal(fmt.Errorf("no results in %s: run make bench-bpf, bench or bench-live first", *in))
	}
}

// errNoData is a plot's input file without the lines it draws (go.txt of
// a run of some packages only): that plot is skipped.
var errNoData = errors.New("nothing to draw")

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "plot:", err)
	os.Exit(1)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func save(p *plot.Plot, path string) error {
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

// log10 ticks labelled 1, 1k, 10k...
type countTicks struct{}

func (countTicks) Ticks(min, max float64) []plot.Tick {
	var t []plot.Tick
	for v := 1.0; v <= max*1.0001; v *= 10 {
		if v >= min*0.9999 {
			t = append(t, plot.Tick{Value: v, Label: human(v)})
		}
	}
	return t
}

// barLabels writes each text centred above its point, dx to the right
// and 4 points up (the bars' medians and ratios).
func barLabels(at plotter.XYs, texts []string, dx vg.Length) (*plotter.Labels, error) {
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: at, Labels: texts})
	if err != nil {
		return nil, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = text.XCenter
		l.TextStyle[i].YAlign = text.YBottom
	}
	l.Offset = vg.Point{X: dx, Y: vg.Points(4)}
	return l, nil
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}

// ---- ns/packet vs flow cardinality (bench-bpf) ----

type bpfRow struct {
	Family   string `json:"family"`
	Path     string `json:"path"`
	Flows    int    `json:"flows"`
	Features string `json:"features"`
	Prog     struct {
		Median, P10, P90 float64
	} `json:"prog"`
	Floor struct {
		Median float64
	} `json:"floor"`
}

func plotDatapath(src, outDir string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var res struct {
		Machine  map[string]string `json:"machine"`
		Datapath []bpfRow          `json:"datapath"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("flowlens TC program, BPF_PROG_TEST_RUN (%s CPUs, kernel %s)", res.Machine["cpus"], res.Machine["kernel"])
	p.X.Label.Text = "flows in the active map"
	p.Y.Label.Text = "ns per packet (median; bars: p10..p90)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = countTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	i := 0
	var floor []float64
	ymax := 0.0
	for _, fam := range []string{"ipv4", "ipv6"} {
		for pi, path := range []string{"exist-hot", "exist", "new", "carry", "exist-hot/lockfree"} {
			if path == "exist-hot/lockfree" && fam != "ipv4" {
				continue
			}
			var pts plotter.XYs
			var errs plotter.YErrors
			for _, r := range res.Datapath {
				if r.Family != fam || r.Path != path || r.Features != "off" {
					continue
				}
				pts = append(pts, plotter.XY{X: float64(r.Flows), Y: r.Prog.Median})
				ymax = math.Max(ymax, r.Prog.P90)
				errs = append(errs, struct{ Low, High float64 }{r.Prog.Median - r.Prog.P10, r.Prog.P90 - r.Prog.Median})
				if path == "exist-hot" {
					floor = append(floor, r.Floor.Median)
				}
			}
			if len(pts) == 0 {
				continue
			}
			c := plotutil.Color(pi)
			if path == "exist-hot/lockfree" {
				c = color.RGBA{R: 120, G: 40, B: 160, A: 255}
			}
			line, points, err := pathLine(pts, c, pi, fam == "ipv6")
			if err != nil {
				return err
			}
			eb := &plotter.YErrorBars{XYs: pts, YErrors: errs, LineStyle: draw.LineStyle{Color: c, Width: vg.Points(0.7)}, CapWidth: vg.Points(4)}
			p.Add(line, points, eb)
			label := fmt.Sprintf("%s %s", fam, path)
			if path == "exist-hot/lockfree" {
				label = "ipv4 exist-hot, lock-free fast path (experiment)"
			}
			p.Legend.Add(label, line, points)
			i++
		}
	}
	if len(floor) > 0 {
		f := median(floor)
		fl := plotter.NewFunction(func(float64) float64 { return f })
		fl.Color = color.Gray{Y: 100}
		fl.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(fl)
		p.Legend.Add(fmt.Sprintf("no-op floor (%.0f ns)", f), fl)
	}
	p.Y.Min = 0
	p.Y.Max = ymax * 1.6 // room for the legend
	p.Add(plotter.NewGrid())
	return save(p, filepath.Join(outDir, "bench-bpf-ns-per-packet.png"))
}

// pathLine is one path's line and points: its colour, the shape of its
// index, dashed for the second family or the earlier build.
func pathLine(pts plotter.XYs, c color.Color, shape int, dashed bool) (*plotter.Line, *plotter.Scatter, error) {
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return nil, nil, err
	}
	line.Color, points.Color = c, c
	points.Shape = plotutil.Shape(shape)
	if dashed {
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	return line, points, nil
}

func readBPF(src string) ([]bpfRow, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	var res struct {
		Datapath []bpfRow `json:"datapath"`
	}
	return res.Datapath, json.Unmarshal(b, &res)
}

// plotBeforeAfter draws IPv4, features off, every path of two bench-bpf
// runs: the earlier build dashed, the later solid.
func plotBeforeAfter(beforeSrc, afterSrc, outDir string) error {
	before, err := readBPF(beforeSrc)
	if err != nil {
		return err
	}
	after, err := readBPF(afterSrc)
	if err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = "flowlens TC program before/after (IPv4, BPF_PROG_TEST_RUN)"
	p.X.Label.Text = "flows in the active map"
	p.Y.Label.Text = "ns per packet (median)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = countTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	ymax := 0.0
	for pi, path := range []string{"exist-hot", "exist", "new", "carry", "listed", "inherit"} {
		for _, run := range []struct {
			name string
			rows []bpfRow
		}{{"before", before}, {"after", after}} {
			var pts plotter.XYs
			for _, r := range run.rows {
				if r.Family == "ipv4" && r.Path == path && r.Features == "off" {
					pts = append(pts, plotter.XY{X: float64(r.Flows), Y: r.Prog.Median})
					ymax = math.Max(ymax, r.Prog.Median)
				}
			}
			if len(pts) == 0 {
				continue
			}
			line, points, err := pathLine(pts, plotutil.Color(pi), pi, run.name == "before")
			if err != nil {
				return err
			}
			p.Add(line, points)
			p.Legend.Add(path+" "+run.name, line, points)
		}
	}
	p.Y.Min = 0
	p.Y.Max = ymax * 1.9 // room for the legend
	p.Add(plotter.NewGrid())
	return save(p, filepath.Join(outDir, "bench-bpf-before-after.png"))
}

// ---- eviction time per flow vs flows (bench) ----

var benchLine = regexp.MustCompile(`^Benchmark(EvictMap|Evict)/flows=([0-9]+[kM]?)/(reader|enrich)=(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

func parseCount(s string) float64 {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1e3, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, strings.TrimSuffix(s, "M")
	}
	v, _ := strconv.ParseFloat(s, 64)
	return v * mult
}

func plotEviction(src, outDir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	// series name -> flows -> ns/flow samples
	data := map[string]map[float64][]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		fields := strings.Fields(m[6])
		for j := 0; j+1 < len(fields); j += 2 {
			if fields[j+1] != "ns/flow" {
				continue
			}
			v, _ := strconv.ParseFloat(fields[j], 64)
			name := ""
			if m[1] == "EvictMap" {
				name = "map read+delete: " + m[4]
			} else {
				name = "whole eviction (agent): enrich=" + m[4]
			}
			if data[name] == nil {
				data[name] = map[float64][]float64{}
			}
			n := parseCount(m[2])
			data[name][n] = append(data[name][n], v)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(data) == 0 {
		return fmt.Errorf("%w: no Evict/EvictMap ns/flow lines", errNoData)
	}
	p := plot.New()
	p.Title.Text = "Eviction cost per flow (median of -count runs)"
	p.X.Label.Text = "flows evicted"
	p.Y.Label.Text = "µs per flow (log)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = countTicks{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Max = 60
	names := make([]string, 0, len(data))
	for n := range data {
		if strings.Contains(n, "batch-read-only") || strings.Contains(n, "delete-known-keys") || strings.Contains(n, "10pct") {
			continue
		}
		names = append(names, n)
	}
	slices.Sort(names)
	for i, name := range names {
		var pts plotter.XYs
		for n, vs := range data[name] {
			pts = append(pts, plotter.XY{X: n, Y: median(vs) / 1000})
		}
		slices.SortFunc(pts, func(a, b plotter.XY) int { return int(a.X - b.X) })
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		c := plotutil.Color(i)
		line.Color, points.Color, points.Shape = c, c, plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(name, line, points)
	}
	target := plotter.NewFunction(func(float64) float64 { return 1 })
	target.Color = color.RGBA{R: 200, A: 255}
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(target)
	p.Legend.Add("target: 1 µs/flow at 100k", target)
	p.Add(plotter.NewGrid())
	return save(p, filepath.Join(outDir, "bench-eviction-per-flow.png"))
}

// ---- latency percentiles with and without the agent (bench-live) ----

func plotLatency(src, outDir string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var res struct {
		Runs []struct {
			Kind string `json:"kind"`
			Hey  struct {
				P50, P90, P99 float64
			}
		} `json:"runs"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return err
	}
	var a, bb [3][]float64
	for _, r := range res.Runs {
		dst := &a
		if r.Kind == "B" {
			dst = &bb
		}
		dst[0] = append(dst[0], r.Hey.P50)
		dst[1] = append(dst[1], r.Hey.P90)
		dst[2] = append(dst[2], r.Hey.P99)
	}
	if len(a[0]) == 0 || len(bb[0]) == 0 {
		return fmt.Errorf("no A and B runs")
	}
	p := plot.New()
	p.Title.Text = "HTTP latency at a fixed offered load (hey), median over runs"
	p.Y.Label.Text = "ms"
	w := vg.Points(28)
	va := plotter.Values{median(a[0]), median(a[1]), median(a[2])}
	vb := plotter.Values{median(bb[0]), median(bb[1]), median(bb[2])}
	whiskers := func(v [3][]float64, off float64) *plotter.YErrorBars {
		var pts plotter.XYs
		var errs plotter.YErrors
		for i := range v {
			m := median(v[i])
			pts = append(pts, plotter.XY{X: float64(i) + off, Y: m})
			errs = append(errs, struct{ Low, High float64 }{m - slices.Min(v[i]), slices.Max(v[i]) - m})
		}
		return &plotter.YErrorBars{XYs: pts, YErrors: errs, LineStyle: draw.LineStyle{Color: color.Black, Width: vg.Points(1)}, CapWidth: vg.Points(6)}
	}
	barA, err := plotter.NewBarChart(va, w)
	if err != nil {
		return err
	}
	barA.Color = plotutil.Color(0)
	barA.Offset = -w / 2
	barB, err := plotter.NewBarChart(vb, w)
	if err != nil {
		return err
	}
	barB.Color = plotutil.Color(1)
	barB.Offset = w / 2
	p.Add(barA, barB, plotter.NewGrid(), whiskers(a, -0.07), whiskers(bb, 0.07))
	p.Legend.Add(fmt.Sprintf("without agent (A runs, n=%d)", len(a[0])), barA)
	p.Legend.Add(fmt.Sprintf("with agent (B runs, n=%d)", len(bb[0])), barB)
	p.Title.Text = "HTTP latency at a fixed offered load (hey): median, whiskers min..max over runs"
	hi := 0.0
	for i := range a {
		hi = math.Max(hi, math.Max(slices.Max(a[i]), slices.Max(bb[i])))
	}
	p.Y.Max = hi * 1.25
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX("p50", "p90", "p99")
	return save(p, filepath.Join(outDir, "bench-live-latency.png"))
}

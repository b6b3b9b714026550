package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// ---- flowlens beside NetObserv on live traffic (bench-live PEER=1) ----

// spread is a median with its min and max over rounds, as
// hack/bench/live/sidebyside.go writes it.
type spread struct {
	Med float64 `json:"median"`
	Min float64 `json:"min"`
	Max float64 `json:"max"`
	N   int     `json:"n"`
}

func spreadOf(v []float64) spread {
	v = slices.DeleteFunc(slices.Clone(v), func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) })
	if len(v) == 0 {
		return spread{}
	}
	return spread{median(v), slices.Min(v), slices.Max(v), len(v)}
}

type sbsSummary struct {
	Harness    string `json:"harness"` // fixed, saturating; "" in files from before the harnesses
	Workload   string `json:"workload"`
	Title      string `json:"title"`
	FlowlensNs spread `json:"flowlens_tc_ns_per_packet"`
	PeerNs     spread `json:"netobserv_tc_ns_per_packet"`
	Ratio      spread `json:"ratio"` // per-round flowlens / NetObserv
}

type sbsResults struct {
	Machine string            `json:"machine"`
	Agents  map[string]string `json:"agents"`
	Options struct {
		Workloads []string `json:"workloads"`
	} `json:"options"`
	Runs []struct {
		Harness       string  `json:"harness"`
		Workload      string  `json:"workload"`
		Round         int     `json:"round"`
		Agent         string  `json:"agent"`
		TCNsPerPacket float64 `json:"tc_ns_per_packet"`
	} `json:"runs"`
	Summary []sbsSummary `json:"summary"`
}

// summaries are the JSON's own (what its tables print); a file without
// them is summarised from its runs, pairing the two agents by harness and
// round.
func (res *sbsResults) summaries() []sbsSummary {
	if len(res.Summary) > 0 {
		return res.Summary
	}
	type key struct{ harness, workload string }
	var keys []key
	for _, w := range res.Options.Workloads {
		keys = append(keys, key{"", w})
	}
	for _, r := range res.Runs {
		if k := (key{r.Harness, r.Workload}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	var sums []sbsSummary
	for _, k := range keys {
		fl, peer := map[int]float64{}, map[int]float64{}
		for _, r := range res.Runs {
			switch {
			case r.Harness != k.harness || r.Workload != k.workload || r.TCNsPerPacket <= 0:
			case r.Agent == "flowlens":
				fl[r.Round] = r.TCNsPerPacket
			case r.Agent == "netobserv":
				peer[r.Round] = r.TCNsPerPacket
			}
		}
		var a, b, ratio []float64
		for round, f := range fl {
			if n, ok := peer[round]; ok {
				a, b, ratio = append(a, f), append(b, n), append(ratio, f/n)
			}
		}
		if len(a) > 0 {
			sums = append(sums, sbsSummary{Harness: k.harness, Workload: k.workload, FlowlensNs: spreadOf(a), PeerNs: spreadOf(b), Ratio: spreadOf(ratio)})
		}
	}
	return sums
}

// plotSideBySide draws each workload's TC BPF ns per bridged packet for
// flowlens and NetObserv, per harness (fixed rates, saturating): median
// bars, min..max whiskers over rounds, the flowlens/NetObserv ratio above
// each pair and dashed marks where flowlens would be at 0.6× (issue #33's
// step) and 0.5× (the goal) of NetObserv's cost.
func plotSideBySide(src, outDir string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var res sbsResults
	if err := json.Unmarshal(b, &res); err != nil {
		return err
	}
	var sums []sbsSummary
	for _, s := range res.summaries() {
		if s.FlowlensNs.N > 0 && s.PeerNs.N > 0 {
			sums = append(sums, s)
		}
	}
	if len(sums) == 0 {
		return fmt.Errorf("no workload with both agents' TC ns per packet")
	}

	p := plot.New()
	p.Title.Text = "TC BPF cost on live bridged traffic: flowlens beside NetObserv"
	if res.Machine != "" {
		p.Title.Text += "\n" + res.Machine
	}
	rounds := 0
	for _, s := range sums {
		rounds = max(rounds, s.FlowlensNs.N, s.PeerNs.N)
	}
	p.Y.Label.Text = fmt.Sprintf("TC BPF ns per bridged packet\n(median; whiskers min..max over %d round%s)", rounds, plural(rounds))

	w := vg.Points(36)
	var vf, vn plotter.Values
	var names []string
	whiskers := &barMarks{Style: draw.LineStyle{Color: color.Black, Width: vg.Points(1)}}
	half := &barMarks{Style: draw.LineStyle{
		Color:  color.RGBA{R: 200, A: 255},
		Width:  vg.Points(1.5),
		Dashes: []vg.Length{vg.Points(4), vg.Points(3)},
	}}
	step := &barMarks{Style: draw.LineStyle{
		Color:  color.RGBA{R: 230, G: 140, A: 255},
		Width:  vg.Points(1.5),
		Dashes: []vg.Length{vg.Points(2), vg.Points(2)},
	}}
	harnesses := map[string]bool{}
	for _, s := range sums {
		harnesses[s.Harness] = true
	}
	var ratioAt plotter.XYs
	var ratios []string
	hi := 0.0
	for i, s := range sums {
		x := float64(i)
		vf = append(vf, s.FlowlensNs.Med)
		vn = append(vn, s.PeerNs.Med)
		title := s.Title
		if title == "" {
			title = s.Workload
		}
		title = wrapTitle(title, 24)
		if len(harnesses) > 1 || s.Harness != "" {
			title = "[" + s.Harness + "]\n" + title
		}
		names = append(names, title)
		whiskers.whisker(x, -w/2, s.FlowlensNs, vg.Points(8))
		whiskers.whisker(x, w/2, s.PeerNs, vg.Points(8))
		half.Marks = append(half.Marks, barMark{X: x, DX0: -w - vg.Points(4), DX1: vg.Points(4), Y0: s.PeerNs.Med / 2, Y1: s.PeerNs.Med / 2})
		step.Marks = append(step.Marks, barMark{X: x, DX0: -w - vg.Points(4), DX1: vg.Points(4), Y0: s.PeerNs.Med * 0.6, Y1: s.PeerNs.Med * 0.6})
		top := math.Max(s.FlowlensNs.Max, s.PeerNs.Max)
		hi = math.Max(hi, top)
		ratioAt = append(ratioAt, plotter.XY{X: x, Y: top})
		r := s.Ratio
		if r.N == 0 {
			r = spread{Med: s.FlowlensNs.Med / s.PeerNs.Med, N: 1}
		}
		label := fmt.Sprintf("%.2f×", r.Med)
		if r.N > 1 && r.Min != r.Max {
			label += fmt.Sprintf("\n(%.2f–%.2f)", r.Min, r.Max)
		}
		ratios = append(ratios, label)
	}

	barF, err := plotter.NewBarChart(vf, w)
	if err != nil {
		return err
	}
	barF.Color = plotutil.Color(0)
	barF.Offset = -w / 2
	barN, err := plotter.NewBarChart(vn, w)
	if err != nil {
		return err
	}
	barN.Color = plotutil.Color(1)
	barN.Offset = w / 2

	labels, err := barLabels(ratioAt, ratios, 0)
	if err != nil {
		return err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Font.Size = vg.Points(11)
	}

	p.Add(plotter.NewGrid(), barF, barN, step, half, whiskers, labels)
	p.Legend.Add(agentLabel("flowlens", res.Agents["flowlens"]), barF)
	p.Legend.Add(agentLabel("NetObserv", res.Agents["netobserv"]), barN)
	p.Legend.Add("flowlens at 0.6× NetObserv (issue #33's step)", step)
	p.Legend.Add("flowlens at 0.5× NetObserv", half)
	p.Legend.Add("above each pair: flowlens / NetObserv (median of the rounds' ratios)")
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX(names...)
	p.Y.Min = 0
	p.Y.Max = hi * 1.7 // room for the ratios and the legend
	p.Y.Tick.Marker = plot.TickerFunc(linearTicks)
	// Wider with more pairs: eight (two harnesses) need twice four's room.
	width := max(8*vg.Inch, vg.Length(len(sums))*1.6*vg.Inch)
	path := filepath.Join(outDir, "bench-live-sidebyside.png")
	if err := p.Save(width, 5.5*vg.Inch, path); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

// agentLabel is a legend entry: the name and the version the JSON
// recorded, without the Go toolchain or module path.
func agentLabel(name, version string) string {
	version, _, _ = strings.Cut(version, " (")
	version = version[strings.LastIndex(version, "/")+1:]
	if version == "" {
		return name
	}
	return fmt.Sprintf("%s (%s)", name, version)
}

// linearTicks labels round steps (100, 200, 250, 500 ... ns) giving five
// to ten ticks, with unlabelled halves between them.
func linearTicks(min, max float64) []plot.Tick {
	step := math.Pow(10, math.Floor(math.Log10((max-min)/10)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if (max-min)/(step*m) <= 10 {
			step *= m
			break
		}
	}
	var t []plot.Tick
	for v := math.Ceil(min/step) * step; v <= max; v += step / 2 {
		label := ""
		if math.Abs(math.Remainder(v, step)) < step/1e6 {
			label = fmt.Sprintf("%g", v)
		}
		t = append(t, plot.Tick{Value: v, Label: label})
	}
	return t
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// wrapTitle puts a workload title's parenthesis (the load generator's
// command) on lines of its own.
func wrapTitle(s string, width int) string {
	head, paren, ok := strings.Cut(s, " (")
	if !ok {
		return wrap(s, width)
	}
	return wrap(head, width) + "\n" + wrap("("+paren, width)
}

// wrap breaks s into lines of at most width runes at spaces.
func wrap(s string, width int) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len([]rune(line))+1+len([]rune(word)) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return strings.Join(append(lines, line), "\n")
}

// barMarks are line segments placed by a category's data X plus a canvas
// offset, so they line up with offset bars whatever the figure's size.
type barMarks struct {
	Marks []barMark
	Style draw.LineStyle
}

type barMark struct {
	X        float64   // category
	DX0, DX1 vg.Length // from the category's centre
	Y0, Y1   float64
}

// whisker is a vertical min..max line at x+dx with caps of width capW;
// none for a single value.
func (m *barMarks) whisker(x float64, dx vg.Length, s spread, capW vg.Length) {
	if s.Min == s.Max {
		return
	}
	m.Marks = append(m.Marks,
		barMark{X: x, DX0: dx, DX1: dx, Y0: s.Min, Y1: s.Max},
		barMark{X: x, DX0: dx - capW/2, DX1: dx + capW/2, Y0: s.Min, Y1: s.Min},
		barMark{X: x, DX0: dx - capW/2, DX1: dx + capW/2, Y0: s.Max, Y1: s.Max},
	)
}

func (m *barMarks) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, k := range m.Marks {
		x := trX(k.X)
		c.StrokeLine2(m.Style, x+k.DX0, trY(k.Y0), x+k.DX1, trY(k.Y1))
	}
}

// Thumbnail is the legend's sample: a horizontal line.
func (m *barMarks) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(m.Style, c.Min.X, y, c.Max.X, y)
}

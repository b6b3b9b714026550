package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// ---- the soak run (make soak: soak.csv, test/soak) ----

// plotSoak draws soak.png: four panels (memory, goroutines, open files,
// the agent's BPF objects) over the run, each series with its
// least-squares line over the window the run is judged on (the last three
// quarters), the window's start marked.
func plotSoak(src, outDir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return err
	}
	if len(recs) < 5 {
		return errNoData
	}
	col := map[string][]float64{}
	for _, r := range recs[1:] {
		for i, name := range recs[0] {
			v, err := strconv.ParseFloat(r[i], 64)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			col[name] = append(col[name], v)
		}
	}
	mins := col["elapsed_s"]
	for i := range mins {
		mins[i] /= 60
	}
	from := mins[len(mins)-1] / 4
	type series struct {
		col, label string
		scale      float64
	}
	panels := []struct {
		title, unit string
		series      []series
	}{
		{"resident memory", "MiB", []series{{"agent_rss_kib", "agent", 1.0 / 1024}, {"collector_rss_kib", "collector", 1.0 / 1024}}},
		{"goroutines", "", []series{{"agent_goroutines", "agent", 1}, {"collector_goroutines", "collector", 1}}},
		{"open files", "", []series{{"agent_fds", "agent", 1}, {"collector_fds", "collector", 1}}},
		{"agent's BPF objects", "", []series{{"agent_bpf_progs", "programs (fds)", 1}, {"agent_bpf_maps", "maps (fds)", 1},
			{"agent_bpf_links", "links (fds)", 1}, {"agent_bpf_alive", "in the kernel", 1}}},
	}
	var plots []*plot.Plot
	for _, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "minutes"
		p.Y.Label.Text = pn.unit
		p.Y.Min = 0
		p.Legend.Top = true
		p.Legend.Left = true
		top := 0.0
		for i, s := range pn.series {
			ys, ok := col[s.col]
			if !ok {
				return fmt.Errorf("no column %s", s.col)
			}
			pts := make(plotter.XYs, len(ys))
			var wx, wy []float64
			for k, y := range ys {
				pts[k] = plotter.XY{X: mins[k], Y: y * s.scale}
				top = max(top, y*s.scale)
				if mins[k] >= from {
					wx, wy = append(wx, mins[k]), append(wy, y*s.scale)
				}
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = plotutil.Color(i)
			l.Width = vg.Points(1)
			p.Add(l)
			p.Legend.Add(s.label, l)
			if a, b, ok := leastSquares(wx, wy); ok {
				fit, _ := plotter.NewLine(plotter.XYs{{X: from, Y: a + b*from}, {X: wx[len(wx)-1], Y: a + b*wx[len(wx)-1]}})
				fit.Color = color.Black
				fit.Width = vg.Points(0.7)
				fit.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
				p.Add(fit)
			}
		}
		p.Y.Max = top * 1.25
		mark, _ := plotter.NewLine(plotter.XYs{{X: from, Y: 0}, {X: from, Y: p.Y.Max}})
		mark.Color = color.Gray{Y: 150}
		mark.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
		p.Add(mark)
		plots = append(plots, p)
	}
	img := vgimg.New(12*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	t := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	grid := [][]*plot.Plot{{plots[0], plots[1]}, {plots[2], plots[3]}}
	cs := plot.Align(grid, t, dc)
	for r := range grid {
		for c := range grid[r] {
			grid[r][c].Draw(cs[r][c])
		}
	}
	path := filepath.Join(outDir, "soak.png")
	w, err := os.Create(path)
	if err != nil {
		return err
	}
	defer w.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

// leastSquares is the line a + b·x that fits (x, y) best.
func leastSquares(x, y []float64) (a, b float64, ok bool) {
	n := float64(len(x))
	if len(x) < 2 {
		return 0, 0, false
	}
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
	}
	if sxx == 0 {
		return 0, 0, false
	}
	b = sxy / sxx
	return my - b*mx, b, true
}

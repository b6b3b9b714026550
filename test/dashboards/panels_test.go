package dashboardslab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/operator/dashboards"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

const repoRoot = "../.."

// Grafana's built-in interval variables, for a Prometheus data source
// scraped every second and a range short enough that $__interval is the
// scrape interval: $__rate_interval = max($__interval + scrape interval,
// 4 × scrape interval).
const (
	scrapeInterval = time.Second
	step           = time.Second
	rateInterval   = "4s"
)

// Timings: the test stops as soon as every panel has data after at least
// minTraffic of traffic; with results asked for, it runs renderTraffic so
// the pictures show a longer stretch.
const (
	minTraffic    = 10 * time.Second
	maxTraffic    = 40 * time.Second
	renderTraffic = 45 * time.Second
)

// TestPanels: every query of every panel of every committed dashboard
// returns data from a real Prometheus scraping a real agent and collector
// in a lab with traffic and drops (see the package doc).
func TestPanels(t *testing.T) {
	netlab.Require(t)
	prom := findPrometheus(t)
	boards := loadDashboards(t)
	resultsPath := os.Getenv("FLOWLENS_DASHBOARDS_RESULTS")

	// The collector builds while the lab is set up.
	collectorBin := make(chan string, 1)
	buildErr := make(chan error, 1)
	go func() {
		bin, err := buildCollector(t.TempDir())
		collectorBin <- bin
		buildErr <- err
	}()

	l := newLab(t)

	bin := <-collectorBin
	if err := <-buildErr; err != nil {
		t.Fatal(err)
	}
	col := startCollector(t, bin)

	// The agent, in process, with every feature, exporting to the
	// collector; a small flow map so the port scan overflows it.
	h := agenttest.Start(t, 3, agent.Options{}, l.netnsArg(), "--metrics-address=127.0.0.1:0", "--export=grpc",
		"--target="+col.grpcAddr, "--node-name=lab-node", "--cache-active-timeout=1s",
		"--cache-max-flows=256", "--features=drops,rtt,retransmits,tcp")
	if n := h.A.DP.Attached(); n != 3 {
		t.Fatalf("agent attached to %d interfaces, want 3 (eth0 of each workload)", n)
	}

	p := startPrometheus(t, prom, map[string]string{
		"flowlens-agent":     h.A.MetricsAddr(),
		"flowlens-collector": col.metricsAddr,
	})

	tctx, stopTraffic := context.WithCancel(context.Background())
	tr, err := l.startTraffic(tctx)
	if err != nil {
		stopTraffic()
		t.Fatalf("traffic: %v", err)
	}
	trafficStopped := false
	stopTrafficNow := func() {
		if trafficStopped {
			return
		}
		trafficStopped = true
		stopTraffic()
		if err := tr.wait(); err != nil {
			t.Errorf("traffic: %v", err)
		}
	}
	t.Cleanup(stopTrafficNow)
	start := time.Now()
	t.Logf("traffic started; agent metrics %s, collector metrics %s, prometheus %s", h.A.MetricsAddr(), col.metricsAddr, p.URL)

	// Both targets must be up before any panel can have data.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitUp(t, ctx, p, 2)

	// Evaluate every panel until all have data (or the time is up). With
	// results asked for, run the full render duration first.
	minimum, deadline := minTraffic, maxTraffic
	if resultsPath != "" {
		minimum, deadline = renderTraffic, renderTraffic+maxTraffic
	}
	var res []boardResult
	var failures []string
	var sel map[string]string
	kbQueries := 0 // kube-burner profile queries checked too
	for {
		elapsed := time.Since(start)
		if elapsed < minimum {
			time.Sleep(min(minimum-elapsed, 2*time.Second))
			continue
		}
		end := time.Now()
		res, failures = evaluate(t, ctx, p, boards, start, end, nil)
		if len(failures) == 0 {
			failures = checkExpectations(res, col.static)
		}
		if len(failures) == 0 {
			failures, kbQueries, err = kubeBurnerFailures(ctx, p, start, end)
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(failures) == 0 {
			// The variables filter: each query variable set to a value
			// it offers, as a user picking one (see selection).
			sel = selection(t, ctx, p, boards, start, end)
			if len(sel) > 0 {
				_, failures = evaluate(t, ctx, p, boards, start, end, sel)
			}
		}
		if len(failures) == 0 || time.Since(start) > deadline {
			break
		}
		t.Logf("after %s, %d checks failing yet, e.g. %s", time.Since(start).Round(time.Second), len(failures), failures[0])
		time.Sleep(2 * time.Second)
	}
	t.Logf("evaluated after %s of traffic", time.Since(start).Round(time.Second))
	stopTrafficNow()
	h.Stop()

	total := 0
	for _, b := range res {
		for _, pr := range b.Panels {
			total += len(pr.Targets)
		}
	}
	for _, f := range failures {
		t.Error(f)
	}
	if len(failures) == 0 {
		t.Logf("%d queries of %d dashboards all returned data, with every variable on All and with %v; the lab showed as expected (pods resolved: %v); so did %d queries of %s", total, len(res), sel, col.static, kbQueries, kubeBurnerProfile)
	}
	if resultsPath != "" {
		writeResults(t, resultsPath, res, start, col.static)
	}
}

// board is one committed dashboard.
type board struct {
	File  string
	Model *dashboards.Model
}

func loadDashboards(t *testing.T) []board {
	t.Helper()
	ds, err := dashboards.All()
	if err != nil {
		t.Fatal(err)
	}
	var out []board
	for _, d := range ds {
		js, err := os.ReadFile(filepath.Join(repoRoot, "manifests", "dashboards", d.File))
		if err != nil {
			t.Fatalf("%v (run `make generate-dashboards`)", err)
		}
		m, err := dashboards.Parse(js)
		if err != nil {
			t.Fatalf("%s: %v", d.File, err)
		}
		out = append(out, board{File: d.File, Model: m})
	}
	return out
}

// vars are a dashboard's variables as Grafana substitutes them when the
// dashboard opens (All everywhere, default Top N), plus the built-ins.
func vars(m *dashboards.Model, start, end time.Time) map[string]string {
	v := m.Values()
	v["__rate_interval"] = rateInterval
	v["__interval"] = step.String()
	v["__range"] = fmt.Sprintf("%ds", int(math.Round(end.Sub(start).Seconds())))
	return v
}

type boardResult struct {
	Title  string        `json:"title"`
	UID    string        `json:"uid"`
	File   string        `json:"file"`
	Panels []panelResult `json:"panels"`
}

type panelResult struct {
	dashboards.Panel
	Targets []targetResult `json:"targets"`
}

type targetResult struct {
	dashboards.Target
	Query  string   `json:"query"` // the expression sent, variables substituted
	Series []series `json:"series"`
	Error  string   `json:"error,omitempty"`
}

// evaluate runs every query of every panel once: range queries over
// [start, end] at step, instant ones at end. failures name each query
// without data (no series, or no sample that is a number).
//
// selection overrides variables (a value picked in the dashboard), and is
// named in failures.
func evaluate(t *testing.T, ctx context.Context, p *prometheus, boards []board, start, end time.Time, selection map[string]string) (out []boardResult, failures []string) {
	t.Helper()
	with := ""
	if len(selection) > 0 {
		var kv []string
		for k, v := range selection {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		with = " (with " + strings.Join(kv, ", ") + ")"
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, b := range boards {
		br := boardResult{Title: b.Model.Title, UID: b.Model.UID, File: b.File}
		v := vars(b.Model, start, end)
		for k, x := range selection {
			if _, ok := v[k]; ok {
				v[k] = x
			}
		}
		for _, pnl := range b.Model.Panels {
			pr := panelResult{Panel: pnl, Targets: make([]targetResult, len(pnl.Targets))}
			for i, tg := range pnl.Targets {
				tr := &pr.Targets[i]
				tr.Target = tg
				q, err := dashboards.Expand(tg.Expr, v)
				if err != nil {
					tr.Error = err.Error()
					failures = append(failures, fmt.Sprintf("%s / panel %q query %s%s: %v", b.Model.Title, pnl.Title, tg.RefID, with, err))
					continue
				}
				tr.Query = q
				wg.Add(1)
				sem <- struct{}{}
				go func(title string) {
					defer func() { <-sem; wg.Done() }()
					s := step
					if tg.Instant {
						s = 0
					}
					ss, err := p.query(ctx, q, start, end, s)
					mu.Lock()
					defer mu.Unlock()
					tr.Series = ss
					finite := 0
					for _, x := range ss {
						finite += x.finite()
					}
					switch {
					case err != nil:
						tr.Error = err.Error()
						failures = append(failures, fmt.Sprintf("%s / panel %q query %s%s: %v\n\t%s", b.Model.Title, title, tg.RefID, with, err, q))
					case finite == 0:
						tr.Error = "no data"
						failures = append(failures, fmt.Sprintf("%s / panel %q query %s%s returned no data (%d series, no numeric sample)\n\t%s", b.Model.Title, title, tg.RefID, with, len(ss), q))
					}
				}(pnl.Title)
			}
			br.Panels = append(br.Panels, pr)
		}
		out = append(out, br)
	}
	wg.Wait()
	sort.Strings(failures)
	return out, failures
}

// waitUp waits until Prometheus has scraped n targets successfully.
func waitUp(t *testing.T, ctx context.Context, p *prometheus, n int) {
	t.Helper()
	for {
		ss, err := p.query(ctx, "up == 1", time.Time{}, time.Now(), 0)
		if err == nil && len(ss) >= n {
			return
		}
		if ctx.Err() != nil {
			all, _ := p.query(context.Background(), "up", time.Time{}, time.Now(), 0)
			t.Fatalf("Prometheus scraped %d targets successfully, want %d: %v (up: %+v)", len(ss), n, err, all)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// selection picks, for each query variable, one value its label_values
// query offers, as a user would (regex-escaped, as Grafana formats a single
// value): the lab's busiest namespace pair, shop → data (backend → database:
// bytes, loss, retransmits, RTT), or else the first value. With enrichment
// off the namespace variables offer nothing (every namespace is ""): only
// All (already evaluated) exists.
var preferred = map[string]string{"src_namespace": "shop", "dst_namespace": "data"}

func selection(t *testing.T, ctx context.Context, p *prometheus, boards []board, start, end time.Time) map[string]string {
	t.Helper()
	sel := map[string]string{}
	for _, b := range boards {
		for _, v := range b.Model.Variables {
			metric, label, ok := parseLabelValues(v.Query)
			if _, done := sel[v.Name]; v.Type != "query" || !ok || done {
				continue
			}
			vals, err := p.labelValues(ctx, metric, label, start, end)
			if err != nil {
				t.Errorf("variable %s: %s: %v", v.Name, v.Query, err)
				continue
			}
			if len(vals) > 0 {
				pick := vals[0]
				if want, ok := preferred[v.Name]; ok {
					if !slices.Contains(vals, want) {
						t.Errorf("variable %s offers %q, not %q", v.Name, vals, want)
					}
					pick = want
				}
				// Regex-escaped, the backslashes doubled inside PromQL's
				// double-quoted string (Grafana's multi-value formatting).
				sel[v.Name] = strings.ReplaceAll(regexp.QuoteMeta(pick), `\`, `\\`)
			}
			t.Logf("variable %s = %s offers %q", v.Name, v.Query, vals)
		}
	}
	return sel
}

// parseLabelValues splits Grafana's label_values(metric, label).
func parseLabelValues(q string) (metric, label string, ok bool) {
	rest, ok := strings.CutPrefix(q, "label_values(")
	if !ok || !strings.HasSuffix(rest, ")") {
		return "", "", false
	}
	parts := strings.Split(strings.TrimSuffix(rest, ")"), ",")
	if len(parts) != 2 {
		return "", "", false
	}
	return strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1]), true
}

// collectorProc is a flowlens-collector process started by the test.
type collectorProc struct {
	grpcAddr, metricsAddr string
	static                bool // addresses resolve from --k8s-static
}

// buildCollector builds cmd/flowlens-collector into dir, or returns
// $FLOWLENS_COLLECTOR_BIN.
func buildCollector(dir string) (string, error) {
	if bin := os.Getenv("FLOWLENS_COLLECTOR_BIN"); bin != "" {
		return bin, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(dir, "flowlens-collector")
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/flowlens-collector")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/flowlens-collector: %v\n%s", err, out)
	}
	return bin, nil
}

// startCollector runs the collector with its metrics on loopback; it is
// stopped when the test ends. The lab has no cluster: with --k8s-static
// (where the collector has it) the workloads' addresses resolve from a
// file, as pods of namespaces "shop" and "data" on nodes "node-a" and
// "node-b", and the outside client is external; without it, enrichment is
// off and every address is external, labelled by subnet.
func startCollector(t *testing.T, bin string) *collectorProc {
	t.Helper()
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	for _, flag := range []string{"metrics-address", "k8s-enrich", "subnet-labels"} {
		if !bytes.Contains(help, []byte("-"+flag)) {
			t.Fatalf("flowlens-collector has no --%s flag: the collector's Prometheus metrics (issue 7) are not in this tree\n%s", flag, help)
		}
	}
	c := &collectorProc{grpcAddr: testkit.FreeAddr(t), metricsAddr: testkit.FreeAddr(t)}
	args := []string{"--listen=" + c.grpcAddr, "--metrics-address=" + c.metricsAddr, "--output=json"}
	if bytes.Contains(help, []byte("-k8s-static")) {
		c.static = true
		file := filepath.Join(t.TempDir(), "k8s-static.json")
		js, err := json.Marshal(staticPods)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, js, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--k8s-static="+file)
	} else {
		args = append(args, "--k8s-enrich=false", "--subnet-labels="+subnetLabels)
	}
	// The flows themselves (stdout) are not needed.
	p := testkit.Start(t, fmt.Sprintf("collector %v", args), exec.Command(bin, args...))
	deadline := time.Now().Add(15 * time.Second)
	for {
		if r, err := httpGet("http://" + c.metricsAddr + "/metrics"); err == nil && strings.Contains(r, "flowlens_collector_") {
			return c
		}
		select {
		case <-p.Done():
			t.Fatalf("collector exited: %v", p.Err())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector metrics not served on %s after 15s", c.metricsAddr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// staticPods is the lab's "cluster" for --k8s-static (enriched.K8sContext's JSON).
var staticPods = map[string]map[string]string{
	frontendIP: {"kind": "pod", "namespace": "shop", "name": "frontend-5d8f7c9b4-x2lqp", "workload": "frontend", "workload_kind": "Deployment", "node": "node-a"},
	backendIP:  {"kind": "pod", "namespace": "shop", "name": "backend-6b7d9f8c5-9kzvw", "workload": "backend", "workload_kind": "Deployment", "node": "node-b"},
	databaseIP: {"kind": "pod", "namespace": "data", "name": "database-0", "workload": "database", "workload_kind": "StatefulSet", "node": "node-b"},
}

// writeResults writes every panel's results for hack/dashboards/render.py,
// each series named by its legend. NaN and infinite samples become null.
func writeResults(t *testing.T, path string, res []boardResult, start time.Time, pods bool) {
	t.Helper()
	type outSeries struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
		Points [][2]any          `json:"points"`
	}
	type outTarget struct {
		RefID   string      `json:"refId"`
		Expr    string      `json:"expr"`
		Query   string      `json:"query"`
		Instant bool        `json:"instant"`
		Series  []outSeries `json:"series"`
	}
	type outPanel struct {
		Title   string             `json:"title"`
		Type    string             `json:"type"`
		Row     string             `json:"row"`
		Unit    string             `json:"unit"`
		Stacked bool               `json:"stacked"`
		GridPos dashboards.GridPos `json:"gridPos"`
		Targets []outTarget        `json:"targets"`
	}
	type outBoard struct {
		Title  string     `json:"title"`
		UID    string     `json:"uid"`
		File   string     `json:"file"`
		Panels []outPanel `json:"panels"`
	}
	var boards []outBoard
	for _, b := range res {
		ob := outBoard{Title: b.Title, UID: b.UID, File: b.File}
		for _, p := range b.Panels {
			op := outPanel{Title: p.Title, Type: p.Type, Row: p.Row, Unit: p.Unit, Stacked: p.Stacked, GridPos: p.GridPos}
			for _, tg := range p.Targets {
				ot := outTarget{RefID: tg.RefID, Expr: tg.Expr, Query: tg.Query, Instant: tg.Instant}
				for _, s := range tg.Series {
					os := outSeries{Name: dashboards.Legend(tg.Legend, s.Labels), Labels: s.Labels}
					for _, pt := range s.Points {
						var v any = pt[1]
						if math.IsNaN(pt[1]) || math.IsInf(pt[1], 0) {
							v = nil
						}
						os.Points = append(os.Points, [2]any{pt[0] - float64(start.Unix()), v})
					}
					ot.Series = append(ot.Series, os)
				}
				op.Targets = append(op.Targets, ot)
			}
			ob.Panels = append(ob.Panels, op)
		}
		boards = append(boards, ob)
	}
	enrich := "--k8s-static: frontend and backend pods of namespace shop (node-a, node-b), database of namespace data (node-b)"
	if !pods {
		enrich = "--k8s-enrich=false with subnet labels"
	}
	js, err := json.MarshalIndent(map[string]any{
		"lab": "three workloads (frontend, backend, database) in network namespaces on a bridge; " +
			"an outside client → frontend TCP requests, frontend → backend TCP requests, backend → database TCP bulk through 3 % loss on a 40 Mbit/s link, " +
			"frontend → database UDP, frontend → backend UDP to a firewalled port, a 300-port UDP scan every 2.3 s; " +
			"agent: --cache-active-timeout=1s --cache-max-flows=256; collector: " + enrich + "; Prometheus scraping every 1 s",
		"start":      start.UTC().Format(time.RFC3339),
		"dashboards": boards,
	}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, js, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

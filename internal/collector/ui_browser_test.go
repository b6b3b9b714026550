package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The lab the page is shown: two namespaces (--k8s-static), shop's web
// (two pods) calling its db and billing's api, billing's api calling its
// ledger (with drops) and an external address (answered for example.com).
const browserLab = `{
  "10.1.0.10": {"kind": "pod", "namespace": "shop", "name": "web-7d9c5-abcde", "workload": "web", "workload_kind": "Deployment", "node": "node-7"},
  "10.1.0.11": {"kind": "pod", "namespace": "shop", "name": "web-7d9c5-fghij", "workload": "web", "workload_kind": "Deployment", "node": "node-7"},
  "10.1.0.20": {"kind": "pod", "namespace": "shop", "name": "db-0", "workload": "db", "workload_kind": "StatefulSet", "node": "node-7"},
  "10.2.0.10": {"kind": "pod", "namespace": "billing", "name": "api-5f6b7-xyzab", "workload": "api", "workload_kind": "Deployment", "node": "node-7"},
  "10.2.0.20": {"kind": "pod", "namespace": "billing", "name": "ledger-0", "workload": "ledger", "workload_kind": "StatefulSet", "node": "node-7"}
}`

// browserLabFlows are the lab's flows, ending in the last 30 s (the page's
// default window is the last 5 minutes).
func browserLabFlows(now time.Time) []flow.Record {
	tcp := func(src, dst string, sport, dport uint16, bytes, packets uint64, rtt time.Duration, ago time.Duration) flow.Record {
		end := now.Add(-ago)
		return flow.Record{SrcAddr: netip.MustParseAddr(src), DstAddr: netip.MustParseAddr(dst), SrcPort: sport, DstPort: dport, Proto: 6,
			Bytes: bytes, Packets: packets, StartTime: end.Add(-2 * time.Second), EndTime: end, Sampling: 1, EthType: 0x800,
			RTTFields: flow.RTTFields{RTT: rtt}}
	}
	drop := func(r flow.Record, packets uint64) flow.Record {
		r.DropsFields = flow.DropsFields{DropPackets: packets, DropBytes: packets * 60, DropCause: "NETFILTER_DROP"}
		return r
	}
	named := func(r flow.Record, name string) flow.Record { // the agents' dns feature saw name answered for it
		r.DstDNSName = name
		return r
	}
	return []flow.Record{
		tcp("10.1.0.10", "10.1.0.20", 41001, 5432, 48000, 60, 800*time.Microsecond, 20*time.Second),
		tcp("10.1.0.11", "10.1.0.20", 41002, 5432, 36000, 45, 900*time.Microsecond, 18*time.Second),
		tcp("10.1.0.10", "10.2.0.10", 41003, 8080, 12000, 20, 1200*time.Microsecond, 15*time.Second),
		drop(tcp("10.2.0.10", "10.2.0.20", 41004, 7000, 9000, 30, 2*time.Millisecond, 8*time.Second), 6),
		drop(tcp("10.2.0.10", "10.2.0.20", 41005, 7000, 3000, 10, 3*time.Millisecond, 4*time.Second), 2),
		named(tcp("10.2.0.10", "93.184.216.34", 41006, 443, 5000, 12, 25*time.Millisecond, 10*time.Second), "example.com"),
	}
}

// The service map in a real browser: headless Chromium loads the page from
// the collector's --ui-listen, fed the lab's flows (Kubernetes context from
// --k8s-static). The graph shows exactly the lab's four workloads, the
// external /24 (labelled with its DNS name) and the four edges, the
// dropping edge red; a click on
// billing's api → ledger edge lists its two flows, newest first, with their
// pods and the drop cause; the namespace filter "shop" leaves shop's
// workloads and the one billing peer they call, hiding ledger and the
// external address; a click on api then lists its one peer left (web), a
// double click on web draws its two pods in its place; a flow sent later
// is drawn by the live refresh; a search highlights its node; a since/until
// window half an hour back draws nothing. Every
// request the browser made went to the collector, and the page logged no
// error, warning or exception (a CSP refusal among them).
// With FLOWLENS_UI_SCREENSHOT set (make ui-screenshot) the page, the edge's
// flows open, is written there as a PNG.
func TestServiceMapInBrowser(t *testing.T) {
	exe := testkit.Chromium(t)
	static := filepath.Join(t.TempDir(), "lab.json")
	if err := os.WriteFile(static, []byte(browserLab), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config()
	cfg.UI = UI{Listen: "127.0.0.1:0", MaxNodes: 100, MaxEdges: 100}
	cfg.History = History{Size: 100, MaxAge: time.Hour}
	cfg.Enrichment.StaticFile = static
	c, _, _ := start(t, cfg)
	collectortest.Send(t, c.lis.Addr().String(), browserLabFlows(time.Now()))
	base := "http://" + c.ui.lis.Addr().String() + "/"

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1440, 860), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-pings", true), chromedp.Flag("dns-prefetch-disable", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.Env("TMPDIR="+testkit.ChromiumTempDir(t)))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()

	// Every request the page makes, its own and those of its scripts
	// (Listen starts the browser: no timeout on its context).
	var mu sync.Mutex
	var requests, errs, problems []string
	if err := chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			requests = append(requests, e.Request.URL)
		case *network.EventLoadingFailed:
			errs = append(errs, e.ErrorText)
		case *runtime.EventExceptionThrown: // the page's script failed
			problems = append(problems, "exception: "+e.ExceptionDetails.Text+" "+describe(e.ExceptionDetails.Exception))
		case *cdplog.EventEntryAdded: // CSP refusals, failed loads, console errors
			if e.Entry.Level == cdplog.EntryLevelError || e.Entry.Level == cdplog.EntryLevelWarning {
				problems = append(problems, string(e.Entry.Level)+": "+e.Entry.Text+" "+e.Entry.URL)
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range e.Args {
					args = append(args, describe(a))
				}
				problems = append(problems, "console."+string(e.Type)+": "+strings.Join(args, " "))
			}
		}
	}); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	ctx, cancelT := context.WithTimeout(bctx, 60*time.Second)
	defer cancelT()
	run := func(what string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, a); err != nil {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%s: %v (requests %q, failures %q)", what, err, requests, errs)
		}
	}
	poll := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("waiting for %s (%s): %v (requests %q, failures %q)", what, expr, err, requests, errs)
		}
	}
	eval := func(expr string, v any) {
		t.Helper()
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %s: %v", expr, raw, err)
		}
	}

	type graph struct {
		Nodes []string `json:"nodes"`
		Edges []string `json:"edges"`
		Red   []string `json:"red"`
	}
	const readGraph = `(() => { const cy = window.flowlensMap.cy;
		return {nodes: cy.nodes().not(".namespace").map(n => n.id()).sort(),
			edges: cy.edges().map(e => e.id()).sort(),
			red: cy.edges().filter(e => e.data("color") === "#c0392b").map(e => e.id()).sort()}; })()`
	const web, db, api, ledger, ext = "workload:shop/Deployment/web", "workload:shop/StatefulSet/db",
		"workload:billing/Deployment/api", "workload:billing/StatefulSet/ledger", "external:93.184.216.0/24"
	edge := func(s, t string) string { return s + "\u2192" + t }

	run("loading "+base, chromedp.Navigate(base))
	poll("the graph", `!!(window.flowlensMap && window.flowlensMap.state.graph)`)
	var g graph
	eval(readGraph, &g)
	want := graph{Nodes: sorted(api, ledger, db, web, ext),
		Edges: sorted(edge(web, db), edge(web, api), edge(api, ledger), edge(api, ext)),
		Red:   []string{edge(api, ledger)}}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("graph drawn:\n%+v\nwant\n%+v", g, want)
	}
	t.Logf("graph: %d nodes %q, %d edges %q, red %q", len(g.Nodes), g.Nodes, len(g.Edges), g.Edges, g.Red)
	// The external /24 is labelled with the DNS name its address had.
	var label string
	eval(fmt.Sprintf(`window.flowlensMap.cy.getElementById(%q).data("label")`, ext), &label)
	if label != "example.com" {
		t.Errorf("the external node's label %q, want example.com (its address's DNS name)", label)
	}

	// where is the page's point where element id is drawn: an edge's
	// midpoint, a node's centre.
	type point struct{ X, Y float64 }
	where := func(id string) point {
		var p point
		eval(fmt.Sprintf(`(() => { const cy = window.flowlensMap.cy; const e = cy.getElementById(%q);
			const p = e.isEdge() ? e.renderedMidpoint() : e.renderedPosition(); const r = cy.container().getBoundingClientRect();
			return {X: r.left + p.x, Y: r.top + p.y}; })()`, id), &p)
		return p
	}

	// A real click where the edge is drawn.
	at := where(edge(api, ledger))
	run(fmt.Sprintf("clicking the edge at (%.0f, %.0f)", at.X, at.Y), chromedp.MouseClickXY(at.X, at.Y))
	poll("the edge's flows", `document.querySelectorAll("#flows .flow").length > 0`)
	var flows []string
	eval(`[...document.querySelectorAll("#flows .flow")].map(f => f.innerText)`, &flows)
	if len(flows) != 2 || !strings.Contains(flows[0], "10.2.0.10:41005 → 10.2.0.20:7000") || !strings.Contains(flows[1], "10.2.0.10:41004 → 10.2.0.20:7000") {
		t.Errorf("the edge's flows %q: want 41005's then 41004's (newest first)", flows)
	}
	for _, f := range flows {
		for _, s := range []string{"pod billing/api-5f6b7-xyzab (Deployment api) → pod billing/ledger-0 (StatefulSet ledger)", "dropped NETFILTER_DROP", "on node-7"} {
			if !strings.Contains(f, s) {
				t.Errorf("flow %q: no %q", f, s)
			}
		}
	}
	t.Logf("clicked %s at (%.0f, %.0f): %d flows %q", edge(api, ledger), at.X, at.Y, len(flows), flows)

	if out := os.Getenv("FLOWLENS_UI_SCREENSHOT"); out != "" {
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", out, len(png))
	}

	// The namespace filter: shop's flows only.
	var ok bool
	eval(`(() => { const i = document.getElementById("namespace"); i.value = "shop"; i.dispatchEvent(new Event("change")); return true; })()`, &ok)
	poll("the filtered graph", fmt.Sprintf(`window.flowlensMap.cy.getElementById(%q).length === 0`, ledger))
	var filtered graph
	eval(readGraph, &filtered)
	want = graph{Nodes: sorted(api, db, web), Edges: sorted(edge(web, db), edge(web, api)), Red: []string{}}
	if !reflect.DeepEqual(filtered, want) {
		t.Errorf("namespace=shop drew\n%+v\nwant\n%+v", filtered, want)
	}
	t.Logf("namespace=shop: nodes %q, edges %q", filtered.Nodes, filtered.Edges)

	// A click on a node: its peers, both directions, by bytes.
	at = where(api)
	run("clicking api", chromedp.MouseClickXY(at.X, at.Y))
	poll("api's peers", `document.querySelectorAll("#peers tr").length > 1`)
	var peers []string
	eval(`[...document.querySelectorAll("#peers tr")].slice(1).map(r => r.innerText.replace(/\s+/g, " ").trim())`, &peers)
	if want := []string{"← shop/web 11.7 KiB 20 0"}; !reflect.DeepEqual(peers, want) {
		t.Errorf("api's peers under namespace=shop: %q, want %q", peers, want)
	}

	// A double click on a workload draws it as its pods.
	at = where(web)
	run("double-clicking web", chromedp.Steps(chromedp.MouseClickXY(at.X, at.Y), chromedp.MouseClickXY(at.X, at.Y, chromedp.ClickCount(2))))
	poll("web's pods", `window.flowlensMap.cy.getElementById("pod:shop/web-7d9c5-abcde").length === 1`)
	var pods graph
	eval(readGraph, &pods)
	const abcde, fghij = "pod:shop/web-7d9c5-abcde", "pod:shop/web-7d9c5-fghij"
	want = graph{Nodes: sorted(api, db, abcde, fghij), Edges: sorted(edge(abcde, db), edge(fghij, db), edge(abcde, api)), Red: []string{}}
	if !reflect.DeepEqual(pods, want) {
		t.Errorf("web expanded drew\n%+v\nwant\n%+v", pods, want)
	}
	t.Logf("api's peers %q; web expanded: nodes %q, edges %q", peers, pods.Nodes, pods.Edges)

	// Live refresh: a new flow (shop's db to billing's ledger) is drawn
	// within the next refresh, nobody touching the page.
	now := time.Now()
	late := flow.Record{SrcAddr: netip.MustParseAddr("10.1.0.20"), DstAddr: netip.MustParseAddr("10.2.0.20"), SrcPort: 41007, DstPort: 7000, Proto: 6,
		Bytes: 700, Packets: 7, StartTime: now.Add(-time.Second), EndTime: now, Sampling: 1, EthType: 0x800}
	collectortest.Send(t, c.lis.Addr().String(), []flow.Record{late})
	poll("the live refresh", fmt.Sprintf(`window.flowlensMap.cy.getElementById(%q).length === 1`, edge(db, ledger)))

	// Search: the nodes whose name matches stand out, the others dim.
	var hits, dim []string
	eval(`(() => { const i = document.getElementById("search"); i.value = "ledg"; i.dispatchEvent(new Event("input")); return true; })()`, &ok)
	eval(`window.flowlensMap.cy.nodes(".hit").map(n => n.id())`, &hits)
	eval(`window.flowlensMap.cy.nodes(".dim").map(n => n.id()).sort()`, &dim)
	if want := []string{ledger}; !reflect.DeepEqual(hits, want) || !reflect.DeepEqual(dim, sorted(abcde, fghij, api, db)) {
		t.Errorf("search ledg: hits %q, dimmed %q; want %q, the four others dimmed", hits, dim, want)
	}
	t.Logf("live: %s drawn; search ledg: hits %q, dimmed %q", edge(db, ledger), hits, dim)

	// A window of since/until an hour to half an hour ago: no flow ended in
	// it, nothing is drawn.
	eval(`(() => { const local = (ms) => { const d = new Date(Date.now() - ms);
			return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19); };
		document.getElementById("since").value = local(3600e3); document.getElementById("until").value = local(1800e3);
		const w = document.getElementById("window"); w.value = "custom"; w.dispatchEvent(new Event("change")); return true; })()`, &ok)
	poll("the empty window", `window.flowlensMap.cy.elements().length === 0`)

	mu.Lock()
	defer mu.Unlock()
	var graphs, flowsReq, custom int
	for _, u := range requests {
		if strings.HasPrefix(u, "data:") {
			continue // inline, no network (the date inputs' icon in Chromium's own style)
		}
		if !strings.HasPrefix(u, base) {
			t.Errorf("the browser requested %s, outside the collector (%s)", u, base)
		}
		graphs += b2i(strings.HasPrefix(u, base+"api/v1/graph?"))
		flowsReq += b2i(strings.HasPrefix(u, base+"api/v1/flows?"))
		if strings.HasPrefix(u, base+"api/v1/graph?") {
			q, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			if v := q.Query(); v.Get("until") != "" {
				since, err1 := time.Parse(time.RFC3339Nano, v.Get("since"))
				until, err2 := time.Parse(time.RFC3339Nano, v.Get("until"))
				if err1 != nil || err2 != nil || until.Sub(since) != 30*time.Minute || time.Since(until) < 29*time.Minute || time.Since(until) > 32*time.Minute {
					t.Errorf("the custom window asked %s: want RFC 3339 since/until, half an hour apart, half an hour ago", u)
				}
				custom++
			}
		}
	}
	if graphs < 4 || flowsReq != 1 || custom < 1 || len(errs) > 0 {
		t.Errorf("requests %q: %d graph (%d with until), %d flows, failures %q; want 4 or more graph, one with until, 1 flows, no failure", requests, graphs, custom, flowsReq, errs)
	}
	t.Logf("%d requests, all to %s or data: URLs: %.2000q", len(requests), base, requests)
	if len(problems) > 0 {
		t.Errorf("the page reported %q", problems)
	}
}

// describe is a remote object's value or description.
func describe(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	if len(o.Value) > 0 {
		return string(o.Value)
	}
	return o.Description
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

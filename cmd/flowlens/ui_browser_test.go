package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// uiLabPods are the browser lab's pods, created on the API server (the
// collector enriches from it): name, namespace, IP, controller (a
// ReplicaSet of a Deployment, named <deployment>-<hash>, or a
// StatefulSet).
var uiLabPods = []struct{ name, ns, ip, ownerKind, owner, hash string }{
	{"web-7d9c5-abcde", "shop", "10.1.0.10", "ReplicaSet", "web-7d9c5", "7d9c5"},
	{"db-0", "shop", "10.1.0.20", "StatefulSet", "db", ""},
	{"api-5f6b7-xyzab", "billing", "10.2.0.10", "ReplicaSet", "api-5f6b7", "5f6b7"},
	{"ledger-0", "billing", "10.2.0.20", "StatefulSet", "ledger", ""},
	{"coredns-6d4b7-qwert", "kube-system", "10.3.0.10", "ReplicaSet", "coredns-6d4b7", "6d4b7"},
}

// uiLabFlows are the lab's flows: four edges in the last minute (web →
// db on TCP 5432, web → api on TCP 8080, api → ledger on TCP 7000 with
// drops, web → coredns on UDP 53), and, 20 minutes back (outside the
// page's default 5 minutes, inside its "last 1 h"), web to 30 external
// /24s with less traffic than any of those.
func uiLabFlows(now time.Time) []flow.Record {
	r := func(src, dst string, dport uint16, proto uint8, bytes uint64, ago time.Duration) flow.Record {
		end := now.Add(-ago)
		return flow.Record{SrcAddr: netip.MustParseAddr(src), DstAddr: netip.MustParseAddr(dst), SrcPort: 41000, DstPort: dport, Proto: proto,
			Bytes: bytes, Packets: bytes / 100, StartTime: end.Add(-time.Second), EndTime: end, Sampling: 1, EthType: 0x800}
	}
	ledger := r("10.2.0.10", "10.2.0.20", 7000, 6, 9000, 8*time.Second)
	ledger.DropsFields = flow.DropsFields{DropPackets: 6, DropBytes: 360, DropCause: "NETFILTER_DROP"}
	out := []flow.Record{
		r("10.1.0.10", "10.1.0.20", 5432, 6, 48000, 20*time.Second),
		r("10.1.0.10", "10.2.0.10", 8080, 6, 12000, 15*time.Second),
		ledger,
		r("10.1.0.10", "10.3.0.10", 53, 17, 2000, 10*time.Second),
	}
	for i := range 30 {
		out = append(out, r("10.1.0.10", fmt.Sprintf("198.18.%d.1", i), 443, 6, uint64(100+i), 20*time.Minute))
	}
	return out
}

// The service map through flowlens ui (its local proxy, --no-browser
// printing the URL) in headless Chromium, the collector authorizing with
// --auth kubernetes against a real kube-apiserver (envtest) and enriching
// from it. A reader's browser sees the lab's graph; the port, protocol
// and "only unhealthy" controls redraw it with exactly the matching
// edges; the last hour, more than --ui-max-nodes 10 / --ui-max-edges 8,
// draws 9 nodes and 8 edges and says how many were left out (26 and 26).
// A user without the read permission sees the collector's refusal, naming
// the permission and the ClusterRole, and none of the lab. Every request
// of both browsers went to flowlens ui's port.
func TestUIInBrowserAuthorized(t *testing.T) {
	exe := testkit.Chromium(t)
	env := envtest.StartT(t, envtest.Options{})
	cfg := env.Config
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"flowlens", "shop", "billing", "kube-system"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil &&
			!strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	yes := true
	for _, p := range uiLabPods {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: p.ownerKind, Name: p.owner, UID: "0d5c3b9e-0000-4000-8000-000000000001", Controller: &yes}}},
			Spec: corev1.PodSpec{NodeName: "node-7", Containers: []corev1.Container{{Name: "c", Image: "example.com/c:1"}}}}
		if p.hash != "" {
			pod.Labels = map[string]string{"pod-template-hash": p.hash}
		}
		pod, err := cs.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{})
		must(err)
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.ip, PodIPs: []corev1.PodIP{{IP: p.ip}}}
		_, err = cs.CoreV1().Pods(p.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		must(err)
	}
	token := authLab(t, cs, []string{"reader", "nobody"}, readerRole)

	admin := writeKubeconfig(t, cfg, &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData})
	pki := receivertest.NewPKI(t)
	uiAddr := testkit.FreeAddr(t)
	col := startCollector(t, "--tls-cert="+pki.ServerCert, "--tls-key="+pki.ServerKey, "--tls-client-ca="+pki.CA,
		"--auth=kubernetes", "--kubeconfig="+admin, "--ui-listen="+uiAddr, "--ui-max-nodes=10", "--ui-max-edges=8",
		"--history-size=1000", "--history-max-age=1h")
	// The agent of node agent-1 (the client certificate's CN) sends.
	collectortest.Export(t, grpcexp.Config{Target: col, NodeName: pki.ClientCN, AgentIP: netip.MustParseAddr("192.0.2.1"),
		TLSCA: pki.CA, TLSCert: pki.ClientCert, TLSKey: pki.ClientKey}, uiLabFlows(time.Now()))

	uiAs := func(sa string) string {
		return startUI(t, "--server="+uiAddr, "--tls-ca="+pki.CA, "--token="+token[sa]) + "/"
	}

	const web, db, api, ledger, dns = "workload:shop/Deployment/web", "workload:shop/StatefulSet/db",
		"workload:billing/Deployment/api", "workload:billing/StatefulSet/ledger", "workload:kube-system/Deployment/coredns"
	edge := func(s, t string) string { return s + "\u2192" + t }
	type graph struct {
		Nodes []string `json:"nodes"`
		Edges []string `json:"edges"`
	}
	const readGraph = `(() => { const cy = window.flowlensMap.cy;
		return {nodes: cy.nodes().not(".namespace").map(n => n.id()).sort(), edges: cy.edges().map(e => e.id()).sort()}; })()`

	t.Run("reader", func(t *testing.T) {
		base := uiAs("reader")
		b := newBrowser(t, exe)
		b.run("loading "+base, chromedp.Navigate(base))
		b.poll("the graph", `!!(window.flowlensMap && window.flowlensMap.state.graph)`)
		var g graph
		b.eval(readGraph, &g)
		want := graph{Nodes: sorted(web, db, api, ledger, dns), Edges: sorted(edge(web, db), edge(web, api), edge(api, ledger), edge(web, dns))}
		if !reflect.DeepEqual(g, want) {
			t.Errorf("graph drawn:\n%+v\nwant\n%+v", g, want)
		}
		var status string
		b.eval(`document.getElementById("status").innerText`, &status)
		if !strings.HasPrefix(status, "5 nodes, 4 edges from 4 flows, ") || strings.Contains(status, "truncated") {
			t.Errorf("status %q: want 5 nodes, 4 edges from 4 flows, not truncated", status)
		}
		t.Logf("reader: nodes %q, edges %q; status %q", g.Nodes, g.Edges, status)

		// set changes a control as a person would, then waits for the
		// drawing of exactly want.
		set := func(what, js string, want graph) {
			t.Helper()
			var ok bool
			b.eval(`(() => { `+js+`; return true; })()`, &ok)
			b.poll(what, fmt.Sprintf(`(() => { const g = %s; return JSON.stringify(g) === %q; })()`, readGraph, mustJSON(t, want)))
			var got graph
			b.eval(readGraph, &got)
			t.Logf("%s: nodes %q, edges %q", what, got.Nodes, got.Edges)
		}
		const input = `const i = document.getElementById("%s"); i.value = %q; i.dispatchEvent(new Event("change"))`
		const check = `const i = document.getElementById("unhealthy"); i.checked = %v; i.dispatchEvent(new Event("change"))`
		set("port 5432", fmt.Sprintf(input, "port", "5432"), graph{Nodes: sorted(web, db), Edges: []string{edge(web, db)}})
		set("port 7000", fmt.Sprintf(input, "port", "7000"), graph{Nodes: sorted(api, ledger), Edges: []string{edge(api, ledger)}})
		set("no port", fmt.Sprintf(input, "port", ""), want)
		set("protocol udp", fmt.Sprintf(input, "protocol", "udp"), graph{Nodes: sorted(web, dns), Edges: []string{edge(web, dns)}})
		set("protocol tcp", fmt.Sprintf(input, "protocol", "tcp"),
			graph{Nodes: sorted(web, db, api, ledger), Edges: sorted(edge(web, db), edge(web, api), edge(api, ledger))})
		set("protocol all", fmt.Sprintf(input, "protocol", ""), want)
		set("only unhealthy", fmt.Sprintf(check, true), graph{Nodes: sorted(api, ledger), Edges: []string{edge(api, ledger)}})
		set("all again", fmt.Sprintf(check, false), want)

		// The last hour: 34 edges between 35 nodes, over the caps.
		var ok bool
		b.eval(`(() => { const w = document.getElementById("window"); w.value = "1h"; w.dispatchEvent(new Event("change")); return true; })()`, &ok)
		b.poll("the truncated graph", `document.getElementById("status").innerText.includes("truncated")`)
		b.eval(readGraph, &g)
		b.eval(`document.getElementById("status").innerText`, &status)
		var externals []string
		for _, n := range g.Nodes {
			if strings.HasPrefix(n, "external:") {
				externals = append(externals, n)
			}
		}
		// Kept: the unhealthy edge, then by bytes: the lab's three, then
		// the four largest externals (.29 to .26, 129 to 126 bytes).
		wantExt := sorted("external:198.18.26.0/24", "external:198.18.27.0/24", "external:198.18.28.0/24", "external:198.18.29.0/24")
		if len(g.Nodes) != 9 || len(g.Edges) != 8 || !reflect.DeepEqual(externals, wantExt) ||
			!strings.HasPrefix(status, "9 nodes, 8 edges from 34 flows, ") ||
			!strings.Contains(status, "truncated: 26 nodes and 26 edges left out (narrow the filters)") {
			t.Errorf("last hour: %d nodes (externals %q), %d edges, status %q; want 9 (externals %q), 8, 34 flows, 26 nodes and 26 edges left out",
				len(g.Nodes), externals, len(g.Edges), status, wantExt)
		}
		t.Logf("last hour: %d nodes, %d edges; status %q", len(g.Nodes), len(g.Edges), status)
		b.checkLocal(base)
	})

	t.Run("without the read permission", func(t *testing.T) {
		base := uiAs("nobody")
		b := newBrowser(t, exe)
		b.run("loading "+base, chromedp.Navigate(base))
		var text string
		b.eval(`document.body.innerText`, &text)
		for _, s := range []string{"The collector refused to show the service map",
			`403 forbidden: User "system:serviceaccount:flowlens:nobody" cannot get flowcollectors/flows in API group flowlens.io (resourceName "cluster"); an administrator can bind the ClusterRole flowlens-flows-reader to it`} {
			if !strings.Contains(text, s) {
				t.Errorf("the page says %q: no %q", text, s)
			}
		}
		for _, s := range []string{"web", "ledger", "coredns", "10.1.0", "198.18", "nodes,"} {
			if strings.Contains(text, s) {
				t.Errorf("the refusal shows %q: %q", s, text)
			}
		}
		var drawn bool
		b.eval(`!!window.flowlensMap`, &drawn)
		if drawn {
			t.Error("the page's script ran")
		}
		t.Logf("nobody's page: %q", text)
		b.mu.Lock()
		for _, u := range b.requests {
			if strings.Contains(u, "api/v1/") {
				t.Errorf("the refused page asked %s", u)
			}
		}
		b.mu.Unlock()
		b.checkLocal(base)
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// browser is a headless Chromium recording every request its pages make
// and every error, warning or exception they report.
type browser struct {
	t        *testing.T
	ctx      context.Context
	mu       sync.Mutex
	requests []string
	failures []string
	problems []string
}

func newBrowser(t *testing.T, exe string) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1440, 860), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-pings", true), chromedp.Flag("dns-prefetch-disable", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.Env("TMPDIR="+testkit.ChromiumTempDir(t)))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	b := &browser{t: t}
	if err := chromedp.Listen(bctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, e.Request.URL)
		case *network.EventLoadingFailed:
			b.failures = append(b.failures, e.ErrorText)
		case *runtime.EventExceptionThrown:
			b.problems = append(b.problems, "exception: "+e.ExceptionDetails.Text)
		case *cdplog.EventEntryAdded:
			// The refused page's own 403 is logged as a failed load:
			// expected, the rest is not.
			if (e.Entry.Level == cdplog.EntryLevelError || e.Entry.Level == cdplog.EntryLevelWarning) &&
				!strings.Contains(e.Entry.Text, "status of 403") {
				b.problems = append(b.problems, string(e.Entry.Level)+": "+e.Entry.Text+" "+e.Entry.URL)
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				b.problems = append(b.problems, "console."+string(e.Type))
			}
		}
	}); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	ctx, cancelT := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(cancelT)
	b.ctx = ctx
	return b
}

func (b *browser) run(what string, a chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, a); err != nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.t.Fatalf("%s: %v (requests %q, failures %q)", what, err, b.requests, b.failures)
	}
}

func (b *browser) poll(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		status, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		b.mu.Lock()
		defer b.mu.Unlock()
		b.t.Fatalf("waiting for %s (%s): %v (page %q, requests %q, failures %q)", what, expr, err, status, b.requests, b.failures)
	}
}

func (b *browser) eval(expr string, v any) {
	b.t.Helper()
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[json.RawMessage](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		b.t.Fatalf("%s: %s: %v", expr, raw, err)
	}
}

// checkLocal fails the test for any request outside base (flowlens ui's
// port) and for what the page reported.
func (b *browser) checkLocal(base string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, u := range b.requests {
		if !strings.HasPrefix(u, "data:") && !strings.HasPrefix(u, base) {
			b.t.Errorf("the browser requested %s, outside flowlens ui (%s)", u, base)
		}
	}
	if len(b.problems) > 0 {
		b.t.Errorf("the page reported %q", b.problems)
	}
	b.t.Logf("%d requests, all to %s", len(b.requests), base)
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/collector/collectoropt"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/shared/servicemap"
	"github.com/flowlens/flowlens/internal/testkit"
)

// The port flowlens ui forwards to is the one the operator gives the
// collectors.
func TestUIPortIsTheCollectors(t *testing.T) {
	if defaultUIPort != collectoropt.DefaultUIPort {
		t.Errorf("flowlens ui forwards to port %d, the collectors serve the map on %d", defaultUIPort, collectoropt.DefaultUIPort)
	}
}

// startUI runs flowlens ui with args (and --no-browser) until the test
// ends and returns the page's URL it prints.
func startUI(t *testing.T, args ...string) string {
	t.Helper()
	out := &collectortest.SyncBuffer{}
	errOut := &collectortest.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"ui", "--no-browser", "--listen=127.0.0.1:0"}, args...), func(string) string { return "" }, out, errOut)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("flowlens ui exited with %d: %s", code, errOut.String())
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, u, ok := strings.Cut(out.String(), " at "); ok {
			u, _, _ = strings.Cut(u, " ")
			return strings.TrimSuffix(u, "/")
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("flowlens ui exited with %d: %s", code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("flowlens ui printed no URL: %q %q", out.String(), errOut.String())
		}
	}
}

// flowlens ui merges two collectors' service maps: the same sample flows
// sent to both make the same three edges with twice the counts, the edge's
// flows come from both (newest first), and the page is the collectors'.
func TestUIMergesCollectors(t *testing.T) {
	recs := collectortest.Records()
	var servers []string
	for range 2 {
		ui := testkit.FreeAddr(t)
		send(t, startCollector(t, "--ui-listen="+ui), "node-7", recs)
		servers = append(servers, "--server="+ui)
	}
	base := startUI(t, servers...)
	const since = "?since=2025-01-01T00:00:00Z"
	var g servicemap.Graph
	getJSON(t, base+"/api/v1/graph"+since, &g)
	if g.Collectors != 2 || g.Flows != 6 || len(g.Nodes) != 3 || len(g.Edges) != 3 {
		t.Fatalf("merged graph: %d collectors, %d flows, %d nodes, %d edges; want 2, 6, 3, 3", g.Collectors, g.Flows, len(g.Nodes), len(g.Edges))
	}
	e := g.Edges[0] // the unhealthy one first
	if e.Source != "external:10.0.0.0/24" || e.Target != "external:192.168.7.0/24" || e.Bytes != 2*9000 || e.Packets != 20 ||
		e.Flows != 2 || e.DropCauses["NETFILTER_DROP"] != 2 || e.RTTP50 != 1_500_000 {
		t.Errorf("merged edge: %+v", e)
	}
	var fl servicemap.Flows
	getJSON(t, base+"/api/v1/flows"+since+"&last=1&source="+url.QueryEscape(e.Source)+"&target="+url.QueryEscape(e.Target), &fl)
	if len(fl.Flows) != 1 || fl.Matched != 2 || !fl.Truncated {
		t.Errorf("merged flows, last=1: %d flows of %d, truncated %v; want 1 of 2, truncated", len(fl.Flows), fl.Matched, fl.Truncated)
	}
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "flowlens service map") || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("page: %d %s %.100s", resp.StatusCode, resp.Header.Get("Content-Type"), page)
	}
	// A bad parameter is the page's error, named.
	resp, err = http.Get(base + "/api/v1/graph?port=http")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `port=\"http\": want a port from 1 to 65535`) {
		t.Errorf("bad port: %d %s", resp.StatusCode, b)
	}
}

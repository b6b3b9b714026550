package collector

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"testing"

	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/collector/ui"
	"github.com/flowlens/flowlens/internal/shared/servicemap"
)

// getJSON GETs url and decodes its JSON answer into v; it returns the
// status.
func getJSON(t *testing.T, u string, v any) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %d %q: %v", u, resp.StatusCode, b, err)
	}
	return resp.StatusCode
}

// The service map is served on --ui-listen from the history: the sample
// flows (not enriched: their ends are external, grouped by /24 and /64)
// make exactly three nodes and three edges with the flows' counts, the
// drop and its cause on the edge to 192.168.7.7; the edge's flows come
// back; with --history-size 0 nothing is bound.
func TestServiceMapOnUIListen(t *testing.T) {
	cfg := config()
	cfg.UI = UI{Listen: "127.0.0.1:0", MaxNodes: 10, MaxEdges: 10}
	c, _, stop := start(t, cfg)
	recs := collectortest.Records()
	collectortest.Send(t, c.lis.Addr().String(), recs)
	base := "http://" + c.ui.lis.Addr().String()
	since := url.QueryEscape(recs[0].StartTime.Add(-1).Format("2006-01-02T15:04:05.999999999Z07:00"))
	var g servicemap.Graph
	if code := getJSON(t, base+ui.PathGraph+"?since="+since, &g); code != 200 {
		t.Fatalf("graph: %d", code)
	}
	var ids []string
	for _, n := range g.Nodes {
		ids = append(ids, n.ID)
	}
	if want := []string{"external:10.0.0.0/24", "external:192.168.7.0/24", "external:fd00::/64"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("nodes %q, want %q", ids, want)
	}
	type sum struct {
		src, dst              string
		bytes, packets, drops uint64
		causes                map[string]uint64
		rtt                   int64
	}
	var got []sum
	for _, e := range g.Edges {
		got = append(got, sum{e.Source, e.Target, e.Bytes, e.Packets, e.DropPackets, e.DropCauses, e.RTTP50})
	}
	want := []sum{ // unhealthy first, then by bytes
		{"external:10.0.0.0/24", "external:192.168.7.0/24", 9000, 10, 1, map[string]uint64{"NETFILTER_DROP": 1}, 1_500_000},
		{"external:10.0.0.0/24", "external:10.0.0.0/24", 120, 2, 0, map[string]uint64{}, 0},
		{"external:fd00::/64", "external:fd00::/64", 104, 1, 0, map[string]uint64{}, 0},
	}
	if !reflect.DeepEqual(got, want) || g.Truncated || g.Flows != 3 {
		t.Errorf("edges %+v, flows %d, truncated %v; want %+v, 3 flows, not truncated", got, g.Flows, g.Truncated, want)
	}

	var fl servicemap.Flows
	q := "?since=" + since + "&source=" + url.QueryEscape("external:10.0.0.0/24") + "&target=" + url.QueryEscape("external:192.168.7.0/24")
	if code := getJSON(t, base+ui.PathFlows+q, &fl); code != 200 || len(fl.Flows) != 1 || fl.Matched != 1 {
		t.Fatalf("flows: %d, %d flows, matched %d; want 200, 1, 1", code, len(fl.Flows), fl.Matched)
	}
	var one struct {
		DstPort  uint16 `json:"dst_port"`
		NodeName string `json:"node_name"`
	}
	if err := json.Unmarshal(fl.Flows[0], &one); err != nil || one.DstPort != 443 || one.NodeName != "node-7" {
		t.Errorf("flow %s: %+v %v; want dst_port 443 of node-7", fl.Flows[0], one, err)
	}
	var e struct{ Error string }
	if code := getJSON(t, base+ui.PathGraph+"?since=later", &e); code != 400 || e.Error != `since="later": want a duration back from now (5m) or an RFC 3339 time` {
		t.Errorf("bad since: %d %q", code, e.Error)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	cfg.History.Size = 0
	c, _, _ = start(t, cfg)
	if c.ui != nil {
		t.Errorf("--history-size 0 serves a service map on %s", c.ui.lis.Addr())
	}
}

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/servicemap"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// The map lab: pod shop/client-1 (Deployment client) and pod
// data/server-0 (StatefulSet server), each in its network namespace,
// joined by a veth pair; the real agent attached to both ends exports to
// a real collector serving the service map.
const (
	mapClientIP = "10.177.44.1"
	mapServerIP = "10.177.44.2"
	mapClient   = "workload:shop/Deployment/client"
	mapServer   = "workload:data/StatefulSet/server"
	// udpFrame is the bytes of one datagram of 100 bytes on the wire
	// (Ethernet 14 + IPv4 20 + UDP 8 + 100), as the agent counts them.
	udpFrame = 14 + 20 + 8 + 100
)

// startMapLab builds the lab, sends the known traffic and returns the
// collector's service map URL once the collector has all of it: shop →
// data 10 datagrams to a listening port, data → shop 3 datagrams to a
// closed port (dropped by the kernel: NO_SOCKET).
func startMapLab(t *testing.T) (mapURL string) {
	netlab.Require(t)
	cl := netlab.NewNetns(t, "map-cl")
	sv := netlab.NewNetns(t, "map-sv")
	netlab.Quiet(t, cl)
	netlab.Quiet(t, sv)
	netlab.Veth(t, cl, "map-cl0", sv, "map-sv0")
	netlab.AddAddr(t, cl, "map-cl0", mapClientIP+"/24")
	netlab.AddAddr(t, sv, "map-sv0", mapServerIP+"/24")

	static := filepath.Join(t.TempDir(), "cluster.json")
	js, _ := json.Marshal(map[string]enriched.K8sContext{
		mapClientIP: {Kind: enriched.KindPod, Namespace: "shop", Name: "client-1", Workload: "client", WorkloadKind: "Deployment", Node: "node-map"},
		mapServerIP: {Kind: enriched.KindPod, Namespace: "data", Name: "server-0", Workload: "server", WorkloadKind: "StatefulSet", Node: "node-map"},
	})
	if err := os.WriteFile(static, js, 0o644); err != nil {
		t.Fatal(err)
	}
	uiAddr := testkit.FreeAddr(t)
	col := startCollector(t, "--k8s-static="+static, "--ui-listen="+uiAddr)
	h := agenttest.Start(t, 2, agent.Options{}, "--netns="+cl.Name+","+sv.Name, "--export=grpc", "--target="+col,
		"--node-name=node-map", "--cache-active-timeout=500ms")
	if n := h.A.DP.Attached(); n != 2 {
		t.Fatalf("agent attached to %d interfaces, want 2", n)
	}
	udp, err := netlab.UDPListen(sv, mapServerIP+":7001")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	if err := netlab.UDPSend(cl, mapClientIP+":5001", mapServerIP+":7001", make([]byte, 100), 10); err != nil {
		t.Fatal(err)
	}
	if err := netlab.UDPSend(sv, mapServerIP+":5002", mapClientIP+":7002", make([]byte, 100), 3); err != nil {
		t.Fatal(err)
	}
	mapURL = "http://" + uiAddr
	// Wait until the collector has every packet (evictions every 500ms).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		g := getGraph(t, mapURL, "protocol=udp")
		var packets uint64
		for _, e := range g.Edges {
			packets += e.Packets
		}
		if packets >= 13 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("service map after 30s: %+v", g)
		}
	}
	return mapURL
}

func getJSON(t *testing.T, u string, v any) {
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
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, b)
	}
}

func getGraph(t *testing.T, base, query string) servicemap.Graph {
	t.Helper()
	var g servicemap.Graph
	getJSON(t, base+"/api/v1/graph?namespace=shop,data&"+query, &g)
	return g
}

// The service map of a real agent's flows: exactly the lab's two workloads
// and its two edges, each edge's packets and bytes what was sent, the
// dropping edge (data → shop, to a closed port) carrying its 3 drops and
// their cause, and its flows listed with their Kubernetes context. The
// drop hooks see the whole host (other tests' drops included) and the
// kernel answers the closed port with ICMP: the graph keeps to the lab's
// namespaces and to UDP.
func TestServiceMapRealAgent(t *testing.T) {
	base := startMapLab(t)
	g := getGraph(t, base, "protocol=udp")
	var nodes []servicemap.Node
	for _, n := range g.Nodes {
		n.Bytes, n.Packets, n.DropPackets = 0, 0, 0
		nodes = append(nodes, n)
	}
	wantNodes := []servicemap.Node{
		{ID: mapServer, Kind: "workload", Namespace: "data", Name: "server", WorkloadKind: "StatefulSet"},
		{ID: mapClient, Kind: "workload", Namespace: "shop", Name: "client", WorkloadKind: "Deployment"},
	}
	if !reflect.DeepEqual(nodes, wantNodes) {
		t.Errorf("nodes %+v\nwant %+v", nodes, wantNodes)
	}
	type edge struct {
		Source, Target string
		Packets, Bytes uint64
		DropPackets    uint64
		DropCauses     map[string]uint64
		Ports          []uint16
		Unhealthy      bool
	}
	var edges []edge
	for _, e := range g.Edges {
		edges = append(edges, edge{e.Source, e.Target, e.Packets, e.Bytes, e.DropPackets, e.DropCauses, e.Ports, e.Unhealthy})
	}
	wantEdges := []edge{ // unhealthy first
		{mapServer, mapClient, 3, 3 * udpFrame, 3, map[string]uint64{"NO_SOCKET": 3}, []uint16{7002}, true},
		{mapClient, mapServer, 10, 10 * udpFrame, 0, map[string]uint64{}, []uint16{7001}, false},
	}
	if !reflect.DeepEqual(edges, wantEdges) || g.Truncated {
		t.Errorf("edges %+v (truncated %v)\nwant %+v", edges, g.Truncated, wantEdges)
	}

	// Clicking the dropping edge: its flows, with their context.
	var fl servicemap.Flows
	getJSON(t, base+"/api/v1/flows?protocol=udp&source="+url.QueryEscape(mapServer)+"&target="+url.QueryEscape(mapClient), &fl)
	var packets, drops uint64
	for _, raw := range fl.Flows {
		var f struct {
			DstPort     uint16              `json:"dst_port"`
			Packets     uint64              `json:"packets"`
			DropPackets uint64              `json:"drop_packets"`
			DropCause   string              `json:"drop_cause"`
			SrcK8s      enriched.K8sContext `json:"src_k8s"`
			DstK8s      enriched.K8sContext `json:"dst_k8s"`
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatal(err)
		}
		if f.DstPort != 7002 || f.DropCause != "NO_SOCKET" || f.SrcK8s.Name != "server-0" || f.DstK8s.Namespace != "shop" {
			t.Errorf("flow of the dropping edge: %s", raw)
		}
		packets, drops = packets+f.Packets, drops+f.DropPackets
	}
	if packets != 3 || drops != 3 || fl.Matched != len(fl.Flows) || fl.Truncated {
		t.Errorf("the dropping edge's flows: %d packets, %d dropped, %d of %d flows; want 3, 3, all", packets, drops, len(fl.Flows), fl.Matched)
	}

	// Filters: only the unhealthy edge; a namespace with nothing; pods.
	if g := getGraph(t, base, "protocol=udp&only_unhealthy=true"); len(g.Edges) != 1 || g.Edges[0].Source != mapServer {
		t.Errorf("only_unhealthy: %+v", g.Edges)
	}
	var none servicemap.Graph
	getJSON(t, base+"/api/v1/graph?namespace=other", &none)
	if len(none.Nodes) != 0 || len(none.Edges) != 0 || none.Flows != 0 {
		t.Errorf("namespace=other: %+v", none)
	}
	if g := getGraph(t, base, "protocol=udp&port=7001&pods=true"); len(g.Edges) != 1 ||
		g.Edges[0].Source != "pod:shop/client-1" || g.Edges[0].Target != "pod:data/server-0" || g.Edges[0].Packets != 10 {
		t.Errorf("pods, port 7001: %+v", g.Edges)
	}

	// The same map through flowlens ui.
	viaUI := startUI(t, "--server="+strings.TrimPrefix(base, "http://"))
	var gu servicemap.Graph
	getJSON(t, viaUI+"/api/v1/graph?namespace=shop,data&protocol=udp", &gu)
	if gu.Collectors != 1 || len(gu.Nodes) != 2 || len(gu.Edges) != 2 || gu.Edges[0].Packets != 3 || gu.Edges[0].DropCauses["NO_SOCKET"] != 3 ||
		gu.Edges[1].Packets != 10 || gu.Edges[1].Bytes != 10*udpFrame {
		t.Errorf("through flowlens ui: %+v", gu)
	}
}

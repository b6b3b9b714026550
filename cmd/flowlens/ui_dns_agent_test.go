package main

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/servicemap"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// The names of external addresses, end to end: pod shop/client-1 asks a
// real resolver (outside the cluster, in its own namespace) for
// api.example.test, answered with the resolver's own address, then sends
// 5 datagrams there. The real agent (feature dns) exports to a real
// collector: the flow's record says dst_dns_name api.example.test (in the
// edge's flows), and the service map's external node for the address's
// /24 lists the name; the client's own address, never answered, has none.
func TestServiceMapDNSNames(t *testing.T) {
	netlab.Require(t)
	const clientIP, extIP = "10.177.45.1", "10.177.45.2"
	const client, ext = "workload:shop/Deployment/client", "external:10.177.45.0/24"
	cl := netlab.NewNetns(t, "dn-cl")
	ex := netlab.NewNetns(t, "dn-ext")
	netlab.Quiet(t, cl)
	netlab.Quiet(t, ex)
	netlab.Veth(t, cl, "dn-cl0", ex, "dn-ext0")
	netlab.AddAddr(t, cl, "dn-cl0", clientIP+"/24")
	netlab.AddAddr(t, ex, "dn-ext0", extIP+"/24")
	netlab.ServeDNS(t, ex, extIP+":53", map[string][]netlab.DNSRecord{"api.example.test": {{Addr: extIP, TTL: 300}}})

	static := filepath.Join(t.TempDir(), "cluster.json")
	js, _ := json.Marshal(map[string]enriched.K8sContext{
		clientIP: {Kind: enriched.KindPod, Namespace: "shop", Name: "client-1", Workload: "client", WorkloadKind: "Deployment", Node: "node-dns"},
	})
	if err := os.WriteFile(static, js, 0o644); err != nil {
		t.Fatal(err)
	}
	uiAddr := testkit.FreeAddr(t)
	col := startCollector(t, "--k8s-static="+static, "--ui-listen="+uiAddr)
	agenttest.Start(t, 2, agent.Options{}, "--netns="+cl.Name+","+ex.Name, "--export=grpc", "--target="+col,
		"--node-name=node-dns", "--cache-active-timeout=500ms", "--features=dns")

	if rc, err := netlab.AskDNS(cl, clientIP+":40053", extIP+":53", netlab.DNSQuery(0x5151, "api.example.test"), 5*time.Second); err != nil || rc != 0 {
		t.Fatalf("api.example.test: rcode %d (%v), want 0", rc, err)
	}
	udp, err := netlab.UDPListen(ex, extIP+":7001")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	if err := netlab.UDPSend(cl, clientIP+":5001", extIP+":7001", make([]byte, 100), 5); err != nil {
		t.Fatal(err)
	}

	base := "http://" + uiAddr
	var g servicemap.Graph
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		getJSON(t, base+"/api/v1/graph?port=7001", &g)
		if len(g.Edges) == 1 && g.Edges[0].Packets == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("service map after 30s: %+v", g)
		}
	}
	names := map[string][]string{}
	for _, n := range g.Nodes {
		names[n.ID] = n.DNSNames
	}
	if want := map[string][]string{client: nil, ext: {"api.example.test"}}; !reflect.DeepEqual(names, want) ||
		g.Edges[0].Source != client || g.Edges[0].Target != ext {
		t.Errorf("nodes' names %q, edges %+v; want %q, %s → %s", names, g.Edges, want, client, ext)
	}

	var fl servicemap.Flows
	getJSON(t, base+"/api/v1/flows?port=7001&source="+url.QueryEscape(client)+"&target="+url.QueryEscape(ext), &fl)
	var packets uint64
	for _, raw := range fl.Flows {
		var f struct {
			Packets    uint64 `json:"packets"`
			SrcDNSName string `json:"src_dns_name"`
			DstDNSName string `json:"dst_dns_name"`
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatal(err)
		}
		if f.DstDNSName != "api.example.test" || f.SrcDNSName != "" {
			t.Errorf("flow to the answered address: %s", raw)
		}
		packets += f.Packets
	}
	if packets != 5 {
		t.Errorf("the edge's flows carry %d packets, want 5", packets)
	}
	t.Logf("external node %s: dns_names %q; %d flows, %d packets, dst_dns_name api.example.test", ext, names[ext], len(fl.Flows), packets)
}

package servicemap

import (
	"net/netip"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

var now = time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)

func pod(ns, w string) enriched.K8sContext {
	return enriched.K8sContext{Kind: enriched.KindPod, Namespace: ns, Name: w + "-0", Workload: w, WorkloadKind: "Deployment"}
}

func fl(src, dst enriched.K8sContext, bytes uint64) *enriched.Flow {
	return &enriched.Flow{Record: flow.Record{SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("10.0.0.2"),
		DstPort: 80, Proto: 6, Bytes: bytes, Packets: 1, EndTime: now.Add(-time.Minute)}, Enriched: true, Src: src, Dst: dst}
}

// An edge's failed connects are its flows' refused and timed-out connects
// (feature tcp); they make it unhealthy, and Merge sums them.
func TestFailedConnects(t *testing.T) {
	a, b := pod("x", "a"), pod("x", "b")
	ok, refused, timedOut := fl(a, b, 100), fl(a, b, 100), fl(a, b, 100)
	ok.TCPConnects = 5
	refused.TCPConnects, refused.TCPRefused = 3, 3
	timedOut.TCPConnects, timedOut.TCPTimeouts = 2, 2
	q, err := ParseQuery(url.Values{}, now, DefaultMaxNodes, DefaultMaxEdges)
	if err != nil {
		t.Fatal(err)
	}
	if g := Build([]*enriched.Flow{ok}, q); len(g.Edges) != 1 || g.Edges[0].FailedConnects != 0 || g.Edges[0].Unhealthy {
		t.Errorf("only established connects: %+v", g.Edges)
	}
	g := Build([]*enriched.Flow{ok, refused, timedOut}, q)
	if len(g.Edges) != 1 || g.Edges[0].FailedConnects != 5 || !g.Edges[0].Unhealthy {
		t.Fatalf("3 refused and 2 timed out: %+v, want 5 failed connects, unhealthy", g.Edges)
	}
	if m := Merge([]Graph{g, g}, q); m.Edges[0].FailedConnects != 10 {
		t.Errorf("merged twice: %d failed connects, want 10", m.Edges[0].FailedConnects)
	}
}

// The caps keep the unhealthy edges first, then the largest, as long as
// both ends fit; what is left out is counted.
func TestBuildCaps(t *testing.T) {
	a, b, c, d := pod("x", "a"), pod("x", "b"), pod("y", "c"), pod("y", "d")
	sick := fl(c, d, 1)
	sick.DropPackets, sick.DropCause = 2, "NO_SOCKET"
	flows := []*enriched.Flow{fl(a, b, 500), fl(a, c, 300), fl(b, c, 100), sick}
	q, err := ParseQuery(url.Values{"max_nodes": {"3"}, "max_edges": {"2"}}, now, DefaultMaxNodes, DefaultMaxEdges)
	if err != nil {
		t.Fatal(err)
	}
	g := Build(flows, q)
	var edges [][2]string
	for _, e := range g.Edges {
		edges = append(edges, [2]string{e.Source, e.Target})
	}
	want := [][2]string{{"workload:y/Deployment/c", "workload:y/Deployment/d"}, {"workload:x/Deployment/a", "workload:y/Deployment/c"}}
	if !reflect.DeepEqual(edges, want) || !g.Truncated || g.OmittedEdges != 2 || g.OmittedNodes != 1 || len(g.Nodes) != 3 || g.Flows != 4 {
		t.Errorf("edges %v, %d nodes, omitted %d nodes %d edges, flows %d; want %v, 3 nodes, omitted 1 and 2, 4 flows",
			edges, len(g.Nodes), g.OmittedNodes, g.OmittedEdges, g.Flows, want)
	}
	// Merging two collectors' graphs sums the edges.
	m := Merge([]Graph{Build(flows, q), Build(flows[:1], q)}, q)
	if m.Collectors != 2 || m.Edges[1].Bytes != 300 || m.Edges[0].DropPackets != 2 {
		t.Errorf("merged: %+v", m)
	}
	q.MaxEdges = 10
	m = Merge([]Graph{Build(flows[:1], q), Build(flows[:1], q)}, q)
	if len(m.Edges) != 1 || m.Edges[0].Bytes != 1000 || m.Edges[0].Flows != 2 || m.Nodes[0].Bytes != 1000 {
		t.Errorf("merged a → b twice: %+v", m)
	}
}

func TestParseQueryErrors(t *testing.T) {
	_, err := ParseQuery(url.Values{"since": {"-5m"}, "port": {"0,80"}, "protocol": {"tcp,gre"}, "max_nodes": {"5000"}, "pods": {"maybe"}},
		now, 300, 1000)
	want := `since="-5m": a negative duration
port="0": want a port from 1 to 65535
protocol="gre": want tcp, udp, icmp, icmpv6, sctp or a number from 0 to 255
pods="maybe": want true or false
max_nodes="5000": want a number from 1 to 300`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	q, err := ParseQuery(url.Values{"since": {"1h"}, "until": {"2026-11-28T09:30:00Z"}, "namespace": {"a,b", "c"}}, now, 300, 1000)
	if err != nil || !q.Since.Equal(now.Add(-time.Hour)) || !q.Until.Equal(now.Add(-30*time.Minute)) || !reflect.DeepEqual(q.Namespaces, []string{"a", "b", "c"}) {
		t.Errorf("%+v %v", q, err)
	}
	back, err := ParseQuery(q.Values(), now, 300, 1000)
	if err != nil || !reflect.DeepEqual(back, q) {
		t.Errorf("Values round trip: %+v %v, want %+v", back, err, q)
	}
}

// An external node lists the DNS names its addresses carried (the agents'
// src_dns_name, dst_dns_name), sorted and once each; a pod's name on a
// flow is not listed on its workload; Merge joins the collectors' names.
func TestExternalDNSNames(t *testing.T) {
	web := pod("shop", "web")
	ext := func(dst, name string) *enriched.Flow {
		f := fl(web, enriched.K8sContext{Kind: "external"}, 100)
		f.DstAddr, f.DstDNSName, f.SrcDNSName = netip.MustParseAddr(dst), name, "web.shop.example"
		return f
	}
	q, err := ParseQuery(url.Values{}, now, DefaultMaxNodes, DefaultMaxEdges)
	if err != nil {
		t.Fatal(err)
	}
	g := Build([]*enriched.Flow{ext("140.82.121.4", "api.github.com"), ext("140.82.121.3", "github.com"),
		ext("140.82.121.4", "api.github.com"), ext("140.82.121.5", ""), ext("93.184.216.34", "example.com")}, q)
	names := map[string][]string{}
	for _, n := range g.Nodes {
		names[n.ID] = n.DNSNames
	}
	want := map[string][]string{"workload:shop/Deployment/web": nil,
		"external:140.82.121.0/24": {"api.github.com", "github.com"}, "external:93.184.216.0/24": {"example.com"}}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
	other := Build([]*enriched.Flow{ext("140.82.121.9", "codeload.github.com")}, q)
	m := Merge([]Graph{g, other}, q)
	for _, n := range m.Nodes {
		if n.ID == "external:140.82.121.0/24" && !reflect.DeepEqual(n.DNSNames, []string{"api.github.com", "codeload.github.com", "github.com"}) {
			t.Errorf("merged: %q", n.DNSNames)
		}
	}
}

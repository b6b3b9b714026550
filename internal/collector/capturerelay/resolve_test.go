package capturerelay

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// Names resolve to the addresses of the matching pods and Services and
// to the nodes that can see their packets: a pod's node; every node for a
// Service (its clients are anywhere); --node restricts; agents connected
// but not asked do no work; asked but absent, or with capture disabled,
// are reported.
func TestResolve(t *testing.T) {
	pod := func(ns, name, wl, node string) enriched.K8sContext {
		return enriched.K8sContext{Kind: enriched.KindPod, Namespace: ns, Name: name, Workload: wl, WorkloadKind: "Deployment", Node: node}
	}
	src := k8smeta.StaticSource{
		netip.MustParseAddr("10.0.0.1"):  pod("shop", "web-1", "web", "node-a"),
		netip.MustParseAddr("10.0.0.2"):  pod("shop", "web-2", "web", "node-b"),
		netip.MustParseAddr("10.0.1.1"):  pod("shop", "db-0", "db", "node-c"),
		netip.MustParseAddr("10.0.9.1"):  pod("other", "web-1", "web", "node-d"),
		netip.MustParseAddr("10.96.0.5"): {Kind: enriched.KindService, Namespace: "shop", Name: "web", Workload: "web", WorkloadKind: "Service"},
	}
	s := New(Options{Lister: src})
	for _, n := range []string{"node-a", "node-b", "node-c", "node-d"} {
		s.agents[n] = &agent{node: n, enabled: n != "node-c"}
	}
	for _, tc := range []struct {
		name    string
		req     *flowv1.CaptureRequest
		ips     string // the filter's either-end addresses
		agents  string // who captures
		missing string
		err     string
	}{
		{"pod by namespace/name", &flowv1.CaptureRequest{Pod: []string{"shop/web-1"}}, "10.0.0.1/32", "node-a", "", ""},
		{"pod by name", &flowv1.CaptureRequest{Pod: []string{"web-1"}}, "10.0.0.1/32 10.0.9.1/32", "node-a node-d", "", ""},
		{"workload with its Service", &flowv1.CaptureRequest{Namespace: []string{"shop"}, Workload: []string{"web"}},
			"10.0.0.1/32 10.0.0.2/32 10.96.0.5/32", "node-a node-b node-d", "node-c", ""},
		{"node restricts", &flowv1.CaptureRequest{Workload: []string{"shop/web"}, Node: []string{"node-b"}}, "10.0.0.1/32 10.0.0.2/32 10.96.0.5/32", "node-b", "", ""},
		{"disabled and absent nodes", &flowv1.CaptureRequest{Node: []string{"node-c", "node-z"}}, "", "", "node-c node-z", ""},
		{"addresses only: every agent", &flowv1.CaptureRequest{Filter: &flowv1.CaptureFilter{FromIp: []string{"10.0.0.0/8"}}}, "", "node-a node-b node-d", "node-c", ""},
		{"no match", &flowv1.CaptureRequest{Pod: []string{"shop/nope"}}, "", "", "", "NotFound: capture: no running pod or Service matches --pod shop/nope"},
		{"node without the pods", &flowv1.CaptureRequest{Pod: []string{"shop/db-0"}, Node: []string{"node-a"}}, "", "", "",
			"NotFound: capture: none of the nodes node-a holds a pod matching --pod shop/db-0"},
		{"ip and names", &flowv1.CaptureRequest{Pod: []string{"shop/db-0"}, Filter: &flowv1.CaptureFilter{Ip: []string{"10.0.0.1"}}}, "", "", "",
			"InvalidArgument: capture: --ip with --namespace/--pod/--workload"},
		{"bad CIDR", &flowv1.CaptureRequest{Filter: &flowv1.CaptureFilter{ToIp: []string{"10.0.0.0/33"}}}, "", "", "", "InvalidArgument: capture: "},
		// --pod a --peer-ip P: the pod's addresses are the pair's first
		// side, P (kept as given) the other; only the pod's node works.
		{"pod and peer: the pair", &flowv1.CaptureRequest{Pod: []string{"shop/web-1"}, Filter: &flowv1.CaptureFilter{PeerIp: []string{"10.0.1.0/24"}}},
			"10.0.0.1/32", "node-a", "", ""},
		{"peer alone: every agent", &flowv1.CaptureRequest{Filter: &flowv1.CaptureFilter{PeerIp: []string{"10.0.1.1"}}}, "", "node-a node-b node-d", "node-c", ""},
		{"bad peer CIDR", &flowv1.CaptureRequest{Filter: &flowv1.CaptureFilter{PeerIp: []string{"10.0.0.300"}}}, "", "", "", "InvalidArgument: capture: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.resolve(tc.req)
			if tc.err != "" {
				if st := status.Convert(err); err == nil || !strings.HasPrefix(st.Code().String()+": "+st.Message(), tc.err) {
					t.Fatalf("err %v, want %s...", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var agents, missing []string
			for _, a := range p.agents {
				agents = append(agents, a.node)
			}
			for n := range p.missing {
				missing = append(missing, n)
			}
			slices.Sort(missing)
			if got := strings.Join(p.filter.Ip, " "); got != tc.ips {
				t.Errorf("addresses %q, want %q", got, tc.ips)
			}
			if got, want := strings.Join(p.filter.PeerIp, " "), strings.Join(tc.req.GetFilter().GetPeerIp(), " "); got != want {
				t.Errorf("peer addresses %q, want %q (as given)", got, want)
			}
			if got := strings.Join(agents, " "); got != tc.agents {
				t.Errorf("agents %q, want %q", got, tc.agents)
			}
			if got := strings.Join(missing, " "); got != tc.missing {
				t.Errorf("missing %q, want %q", got, tc.missing)
			}
		})
	}
	if _, err := New(Options{}).resolve(&flowv1.CaptureRequest{Namespace: []string{"shop"}}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("names without metadata: %v, want FailedPrecondition", err)
	}
}

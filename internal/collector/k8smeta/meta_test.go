package k8smeta_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

func TestSubnets(t *testing.T) {
	s, err := k8smeta.ParseSubnets(" internet=0.0.0.0/0,corp=10.0.0.0/8, lab=10.1.2.0/24,corp=fd00::/8,v6=::/0,mapped=::ffff:192.0.2.0/120")
	if err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]string{
		"10.1.2.3": "lab", "10.9.9.9": "corp", "8.8.8.8": "internet", "::ffff:10.1.2.3": "lab",
		"fd00::1": "corp", "2001:db8::1": "v6", "192.0.2.7": "mapped",
	} {
		if got, ok := s.Label(netip.MustParseAddr(ip)); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", ip, got, ok, want)
		}
	}
	if got := strings.Join(s.Labels(), ","); got != "corp,internet,lab,mapped,v6" {
		t.Errorf("labels %s", got)
	}
	none, _ := k8smeta.ParseSubnets("")
	if l, ok := none.Label(netip.MustParseAddr("8.8.8.8")); ok || l != "" {
		t.Errorf("no subnets: %q %v", l, ok)
	}
	for _, bad := range []string{"corp", "=10.0.0.0/8", "corp=", "corp=10.0.0.0", "corp=10.0.0.0/33", "a=10.0.0.0/8,b=10.0.0.0/8", "a=10.0.0.1/8,b=10.0.0.0/8"} {
		if _, err := k8smeta.ParseSubnets(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestResolverStatic(t *testing.T) {
	pod := enriched.K8sContext{Kind: enriched.KindPod, Namespace: "ns", Name: "p", Workload: "p", WorkloadKind: "Pod"}
	subnets, _ := k8smeta.ParseSubnets("corp=10.0.0.0/8")
	r := &k8smeta.Resolver{Source: k8smeta.StaticSource{netip.MustParseAddr("10.0.0.1"): pod}, Subnets: subnets}
	if m, in := r.Resolve(netip.MustParseAddr("::ffff:10.0.0.1")); !in || m != pod {
		t.Errorf("pod: %+v %v", m, in)
	}
	if m, in := r.Resolve(netip.MustParseAddr("10.0.0.2")); in || m != (enriched.K8sContext{Kind: enriched.KindExternal, Subnet: "corp"}) {
		t.Errorf("external: %+v %v", m, in)
	}
	if m, in := r.Resolve(netip.Addr{}); in || m.Kind != enriched.KindExternal {
		t.Errorf("zero address: %+v %v", m, in)
	}
	var off k8smeta.Resolver // no source, no subnets
	if m, in := off.Resolve(netip.MustParseAddr("10.0.0.1")); in || m != (enriched.K8sContext{Kind: enriched.KindExternal}) {
		t.Errorf("no source: %+v %v", m, in)
	}
}

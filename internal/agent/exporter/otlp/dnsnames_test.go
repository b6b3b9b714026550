package otlp

import (
	"slices"
	"testing"

	"github.com/flowlens/flowlens/pkg/flow"
)

// A flow whose addresses were named by DNS answers has
// flowlens.src_dns_name and flowlens.dst_dns_name, each only when set,
// after the tunnel's place and before sampling.
func TestDNSNameAttributes(t *testing.T) {
	keys := func(r *flow.Record) []string {
		e := newEncoder("node", "")
		e.attributes(r)
		var got []string
		for _, k := range attributeKeys(e.buf) {
			if k == "flowlens.src_dns_name" || k == "flowlens.dst_dns_name" || k == "flowlens.sampling" {
				got = append(got, k)
			}
		}
		return got
	}
	for _, c := range []struct {
		r    flow.Record
		want []string
	}{
		{flow.Record{SrcDNSName: "web.example", DstDNSName: "api.github.com"}, []string{"flowlens.src_dns_name", "flowlens.dst_dns_name", "flowlens.sampling"}},
		{flow.Record{DstDNSName: "api.github.com"}, []string{"flowlens.dst_dns_name", "flowlens.sampling"}},
		{flow.Record{}, []string{"flowlens.sampling"}},
	} {
		if got := keys(&c.r); !slices.Equal(got, c.want) {
			t.Errorf("%q → %q: attributes %v, want %v", c.r.SrcDNSName, c.r.DstDNSName, got, c.want)
		}
	}
}

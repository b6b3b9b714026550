package otlp

import (
	"slices"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/pkg/flow"
)

// Each feature group's attributes: a sample with every field of the group
// set brings out the group's keys (the flowlens.* ones named after its JSON
// fields), a record without the group none; and the flow's attributes are
// the core's followed by the group's.
func TestGroupAttributes(t *testing.T) {
	want := map[string][]string{
		"drops":       {"flowlens.drop_packets", "flowlens.drop_bytes", "flowlens.drop_cause", "flowlens.drop_tcp_state", "flowlens.drop_tcp_flags"},
		"rtt":         {"flowlens.rtt_ns", "flowlens.rtt_max_ns"},
		"retransmits": {"flowlens.retransmits"},
		"xlat":        {"flowlens.xlat_src_addr", "flowlens.xlat_src_port", "flowlens.xlat_dst_addr", "flowlens.xlat_dst_port", "flowlens.xlat_zone_id"},
		"tls":         {"tls.protocol.name", "tls.protocol.version", "tls.cipher", "tls.curve", "flowlens.tls_client_hello", "flowlens.quic"},
		"dns": {"dns.question.name", "flowlens.dns_id", "flowlens.dns_flags", "flowlens.dns_rcode", "flowlens.dns_name_truncated",
			"flowlens.dns_latency_ns", "flowlens.dns_latency_max_ns", "flowlens.dns_timeout"},
		"tcp": {"flowlens.tcp_role", "flowlens.tcp_connects", "flowlens.tcp_refused", "flowlens.tcp_timeouts", "flowlens.tcp_syn_retrans",
			"flowlens.tcp_resets", "flowlens.tcp_zero_windows", "flowlens.tcp_handshake_ns", "flowlens.tcp_handshake_max_ns"},
	}
	for _, g := range flow.Groups {
		var r flow.Record
		g.Sample(&r)
		keys, ok := GroupAttributes(g.Name, &r)
		if !ok || !slices.Equal(keys, want[g.Name]) {
			t.Errorf("%s: attributes %v (%v), want %v", g.Name, keys, ok, want[g.Name])
		}
		for _, k := range keys {
			if name, own := strings.CutPrefix(k, "flowlens."); own && !slices.Contains(g.JSONFields, name) {
				t.Errorf("%s: %s is not named after a JSON field of the group", g.Name, k)
			}
		}
		if keys, _ := GroupAttributes(g.Name, &flow.Record{}); len(keys) != 0 {
			t.Errorf("%s: attributes %v without the group", g.Name, keys)
		}
	}
	// A flow's attributes have every group's, in groups' order.
	var all flow.Record
	var order []string
	for _, g := range groups {
		flow.Groups[slices.IndexFunc(flow.Groups, func(fg flow.Group) bool { return fg.Name == g.name })].Sample(&all)
		order = append(order, want[g.name]...)
	}
	e := newEncoder("node", "")
	e.attributes(&all)
	var got []string
	for _, k := range attributeKeys(e.buf) {
		if slices.Contains(order, k) {
			got = append(got, k)
		}
	}
	if !slices.Equal(got, order) {
		t.Errorf("a flow's group attributes %v, want %v", got, order)
	}
	if _, ok := GroupAttributes("nope", &flow.Record{}); ok {
		t.Error(`GroupAttributes("nope") found a group`)
	}
}

package ipfix

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/flowlens/flowlens/pkg/flow"
)

// Each feature group's elements: a sample with every field of the group
// set picks the template with the group's block, whose elements include
// the group's; a record without the group, none. The blocks' bits follow
// the address family's, one each, within variants.
func TestGroupElements(t *testing.T) {
	pen := func(ids ...uint16) (out []uint16) {
		for _, id := range ids {
			out = append(out, id|enterpriseBit)
		}
		return out
	}
	want := map[string][]uint16{
		"drops":       pen(ieFlDropPackets, ieFlDropBytes, ieFlDropCause, ieFlDropTCPState, ieFlDropTCPFlags),
		"rtt":         pen(ieFlRTTNanoseconds, ieFlRTTMaxNanoseconds),
		"retransmits": pen(ieFlRetransmits),
		"xlat":        append([]uint16{iePostNATSourceIPv4, iePostNATDestinationIPv4, iePostNAPTSourcePort, iePostNAPTDestPort}, pen(ieFlXlatZoneID)...),
		"tls":         pen(ieFlTLSVersion, ieFlTLSCipherSuite, ieFlTLSGroup, ieFlTLSClientHello, ieFlQUIC),
		"dns":         pen(ieFlDNSID, ieFlDNSFlags, ieFlDNSRcode, ieFlDNSName, ieFlDNSNameTruncated, ieFlDNSLatencyNanosecs, ieFlDNSLatencyMaxNanosec, ieFlDNSTimeout),
		"tcp": pen(ieFlTCPRole, ieFlTCPConnects, ieFlTCPRefused, ieFlTCPTimeouts, ieFlTCPSynRetrans, ieFlTCPResets,
			ieFlTCPZeroWindows, ieFlTCPHandshakeNanosecs, ieFlTCPHandshakeMaxNanosec),
	}
	for _, g := range flow.Groups {
		r := flow.Record{SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("10.0.0.2"), Sampling: 1}
		g.Sample(&r)
		ids, ok := GroupElements(g.Name, &r)
		if !ok || !slices.Equal(ids, want[g.Name]) {
			t.Errorf("%s: elements %v (%v), want %v", g.Name, ids, ok, want[g.Name])
		}
		tmpl := templateFields(recordVariant(&r))
		for _, id := range ids {
			if !slices.ContainsFunc(tmpl, func(f field) bool { return f.id == id&^enterpriseBit && f.pen == (id&enterpriseBit != 0) }) {
				t.Errorf("%s: element %#x not in the record's template", g.Name, id)
			}
		}
		if ids, _ := GroupElements(g.Name, &flow.Record{SrcAddr: r.SrcAddr, Sampling: 1}); len(ids) != 0 {
			t.Errorf("%s: elements %v without the group", g.Name, ids)
		}
	}
	if _, ok := GroupElements("nope", &flow.Record{}); ok {
		t.Error(`GroupElements("nope") found a group`)
	}
	for i, b := range blocks {
		if b.bit != variantV6<<(i+1) {
			t.Errorf("block %d has bit %d, want %d", i, b.bit, variantV6<<(i+1))
		}
	}
	if variants != variantV6<<(len(blocks)+1) {
		t.Errorf("variants = %d for %d blocks", variants, len(blocks))
	}
}

// Every block is in the records of the flows that have it: its bit in the
// variant, its data and variable lengths in the record (the record is as
// long as its template says).
func TestBlocksInRecords(t *testing.T) {
	for _, g := range groups {
		fg, _ := flow.GroupNamed(g.name)
		for _, src := range []string{"10.0.0.1", "fd00::1"} {
			a := netip.MustParseAddr(src)
			r := flow.Record{SrcAddr: a, DstAddr: a.Next(), Sampling: 1}
			fg.Sample(&r)
			v := recordVariant(&r)
			if !g.block.has(&r) || v&g.block.bit == 0 {
				t.Errorf("%s (%s): variant %#x lacks its block's bit %#x", g.name, src, v, g.block.bit)
			}
			if n := len(appendRecord(nil, &r, v)); n != recordLen(&r, v) {
				t.Errorf("%s (%s): record of %d bytes, its template says %d", g.name, src, n, recordLen(&r, v))
			}
		}
	}
}

package flowquery

import (
	"net/netip"
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// ip matches either end, from_ip the source, to_ip the destination, by
// CIDR or address; IPv4-mapped addresses count as IPv4.
func TestIP(t *testing.T) {
	f, mapped := base(), base()
	mapped.DstAddr = netip.MustParseAddr("::ffff:10.2.0.1")
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{Ip: []string{"10.2.0.0/16"}}, f, true},
		{&flowv1.FlowFilter{Ip: []string{"10.1.0.1"}}, f, true},
		{&flowv1.FlowFilter{Ip: []string{"10.3.0.0/16", "fd00::/8"}}, f, false},
		{&flowv1.FlowFilter{FromIp: []string{"10.2.0.0/16"}}, f, false},
		{&flowv1.FlowFilter{FromIp: []string{"10.1.0.0/16"}}, f, true},
		{&flowv1.FlowFilter{ToIp: []string{"10.2.0.1"}}, f, true},
		{&flowv1.FlowFilter{ToIp: []string{"10.1.0.1"}}, f, false},
		{&flowv1.FlowFilter{ToIp: []string{"10.2.0.0/16"}}, mapped, true},
		{&flowv1.FlowFilter{ToIp: []string{"::ffff:10.2.0.0/112"}}, f, true},
	})
	checkErrors(t, map[string]*flowv1.FlowFilter{
		`filters[1].ip: "web" is not an IP address or CIDR such as 10.0.0.1 or 10.0.0.0/8`:             {Ip: []string{"web"}},
		`filters[1].from_ip: "10.0.0.300" is not an IP address or CIDR such as 10.0.0.1 or 10.0.0.0/8`: {FromIp: []string{"10.0.0.300"}},
		`filters[1].to_ip: "10.0.0.0/33" is not an IP address or CIDR such as 10.0.0.1 or 10.0.0.0/8`:  {ToIp: []string{"10.0.0.1", "10.0.0.0/33"}},
	})
}

// ParsePrefixes takes CIDRs and addresses, unmapped and masked.
func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes([]string{"10.0.0.1", "10.1.2.3/16", "::ffff:192.0.2.0/120", "fd00::1"})
	want := []string{"10.0.0.1/32", "10.1.0.0/16", "192.0.2.0/24", "fd00::1/128"}
	if err != nil || len(got) != len(want) {
		t.Fatalf("%v %v, want %v", got, err, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("[%d] %v, want %s", i, got[i], want[i])
		}
	}
}

package flowquery

import (
	"testing"
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The response code of a DNS answer; a flow without an answer has none
// (not even NOERROR, 0).
func TestDNSRcode(t *testing.T) {
	f, dns := base(), base()
	dns.Proto, dns.DNSFlags, dns.DNSRcode, dns.DNSLatency = 17, 0x8003, 3, time.Millisecond
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{DnsRcode: []uint32{3}}, dns, true},
		{&flowv1.FlowFilter{DnsRcode: []uint32{0, 2}}, dns, false},
		{&flowv1.FlowFilter{DnsRcode: []uint32{0}}, f, false},
	})
	checkErrors(t, map[string]*flowv1.FlowFilter{
		`filters[1].dns_rcode: 16 is not a response code (0 to 15)`: {DnsRcode: []uint32{3, 16}},
	})
}

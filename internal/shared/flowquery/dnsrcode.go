package flowquery

import (
	"fmt"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// dnsRcode: the flow carried a DNS answer (feature dns) whose response
// code is one of the values (observe turns NXDOMAIN... into numbers).
func dnsRcode(ff *flowv1.FlowFilter) ([]check, error) {
	v := ff.DnsRcode
	for _, c := range v {
		if c > 15 {
			return nil, fmt.Errorf("dns_rcode: %d is not a response code (0 to 15)", c)
		}
	}
	return one(len(v) > 0, func(f *enriched.Flow) bool { return f.DNSAnswered() && in(v, uint32(f.DNSRcode)) }), nil
}

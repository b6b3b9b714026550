package otlp

import "github.com/flowlens/flowlens/pkg/flow"

// The "dns" feature's attributes, on flows with a DNS message seen: the
// semantic conventions' dns.question.name, flowlens.dns_* for the rest.
var (
	kDNSQuestionName          = newKey("dns.question.name")
	kFlowlensDNSID            = newKey("flowlens.dns_id")
	kFlowlensDNSFlags         = newKey("flowlens.dns_flags")
	kFlowlensDNSRcode         = newKey("flowlens.dns_rcode")
	kFlowlensDNSNameTruncated = newKey("flowlens.dns_name_truncated")
	kFlowlensDNSLatencyNs     = newKey("flowlens.dns_latency_ns")
	kFlowlensDNSLatencyMaxNs  = newKey("flowlens.dns_latency_max_ns")
	kFlowlensDNSTimeout       = newKey("flowlens.dns_timeout")
)

var dnsGroup = group{name: "dns", attributes: dnsAttributes}

// dnsAttributes appends the group's attributes of r.
func dnsAttributes(_ *encoder, b []byte, r *flow.Record) []byte {
	if !r.HasDNS() {
		return b
	}
	const a = fLRAttributes
	b = kvString(b, a, kDNSQuestionName, r.DNSName)
	b = kvInt(b, a, kFlowlensDNSID, int64(r.DNSID))
	b = kvInt(b, a, kFlowlensDNSFlags, int64(r.DNSFlags))
	if r.DNSAnswered() {
		b = kvText(b, a, kFlowlensDNSRcode, flow.DNSRcodeName(r.DNSRcode))
	}
	if r.DNSNameTruncated {
		b = kvBool(b, a, kFlowlensDNSNameTruncated, true)
	}
	b = kvInt(b, a, kFlowlensDNSLatencyNs, int64(r.DNSLatency))
	b = kvInt(b, a, kFlowlensDNSLatencyMaxNs, int64(r.DNSLatencyMax))
	if r.DNSTimeout {
		b = kvBool(b, a, kFlowlensDNSTimeout, true)
	}
	return b
}

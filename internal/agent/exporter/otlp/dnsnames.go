package otlp

import "github.com/flowlens/flowlens/pkg/flow"

// The names the dns feature saw answered for the flow's addresses
// (pkg/flow's SrcDNSName, DstDNSName), each when set. Not a feature group:
// any flow may carry them (docs/dns.md, Names of addresses).
var (
	kFlowlensSrcDNSName = newKey("flowlens.src_dns_name")
	kFlowlensDstDNSName = newKey("flowlens.dst_dns_name")
)

// dnsNameAttributes appends r's address names.
func dnsNameAttributes(b []byte, r *flow.Record) []byte {
	if r.SrcDNSName != "" {
		b = kvString(b, fLRAttributes, kFlowlensSrcDNSName, r.SrcDNSName)
	}
	if r.DstDNSName != "" {
		b = kvString(b, fLRAttributes, kFlowlensDstDNSName, r.DstDNSName)
	}
	return b
}

package flow

// Record.SrcDNSName and DstDNSName are the names the agent's DNS feature
// saw answered for the flow's addresses: the question's name of the last A
// or AAAA answer that gave the address, while its TTL ran (feature "dns",
// --dns-names-cache-size; docs/dns.md, Names of addresses). They are not a
// feature group: any flow may carry them, whatever the flow itself is,
// once its address was seen in an answer; "" when none was. At most
// MaxDNSName bytes, in DNS presentation format without the final dot.

// appendDNSNames appends src_dns_name and dst_dns_name, each only when set.
func (r *Record) appendDNSNames(b []byte) []byte {
	if r.SrcDNSName != "" {
		b = append(b, `,"src_dns_name":`...)
		b = appendJSONString(b, r.SrcDNSName)
	}
	if r.DstDNSName != "" {
		b = append(b, `,"dst_dns_name":`...)
		b = appendJSONString(b, r.DstDNSName)
	}
	return b
}

package flowpb

import (
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Flow.dns (feature "dns").
var dnsGroup = group{
	name: "dns",
	num:  55,
	toProto: func(dst, spare *flowv1.Flow, r *flow.Record) {
		m := groupMessage(dst, spare, func(f *flowv1.Flow) **flowv1.DNS { return &f.Dns }, r.HasDNS())
		if m == nil {
			return
		}
		m.DnsId = uint32(r.DNSID)
		m.DnsFlags = uint32(r.DNSFlags)
		m.DnsRcode = uint32(r.DNSRcode)
		m.DnsName = r.DNSName
		m.DnsNameTruncated = r.DNSNameTruncated
		m.DnsLatencyNs = uint64(r.DNSLatency)
		m.DnsLatencyMaxNs = uint64(r.DNSLatencyMax)
		m.DnsTimeout = r.DNSTimeout
	},
	toRecord: func(r *flow.Record, f *flowv1.Flow) {
		if m := f.Dns; m != nil {
			r.DNSFields = flow.DNSFields{DNSID: uint16(m.DnsId), DNSFlags: uint16(m.DnsFlags), DNSRcode: uint8(m.DnsRcode),
				DNSName: m.DnsName, DNSNameTruncated: m.DnsNameTruncated, DNSLatency: time.Duration(m.DnsLatencyNs),
				DNSLatencyMax: time.Duration(m.DnsLatencyMaxNs), DNSTimeout: m.DnsTimeout}
		}
	},
	validate: func(f *flowv1.Flow) error {
		m := f.Dns
		if m == nil {
			return nil
		}
		if err := firstErr(
			checkMax("dns_id", m.DnsId, 0xffff), checkMax("dns_flags", m.DnsFlags, 0xffff),
			checkMax("dns_rcode", m.DnsRcode, 0xff),
		); err != nil {
			return err
		}
		if m.DnsLatencyNs > 1<<63-1 || m.DnsLatencyMaxNs > 1<<63-1 {
			return invalid("dns latency out of range")
		}
		return nil
	},
}

// appendDNS appends Flow.dns of r (wire.go).
func appendDNS(b []byte, r *flow.Record) []byte {
	if !r.HasDNS() {
		return b
	}
	b, start := openGroup(b, 55)
	b = appendVarint(b, 1, uint64(r.DNSID))
	b = appendVarint(b, 2, uint64(r.DNSFlags))
	b = appendVarint(b, 3, uint64(r.DNSRcode))
	b = appendString(b, 4, r.DNSName)
	b = appendBool(b, 5, r.DNSNameTruncated)
	b = appendVarint(b, 6, uint64(r.DNSLatency))
	b = appendVarint(b, 7, uint64(r.DNSLatencyMax))
	b = appendBool(b, 8, r.DNSTimeout)
	return closeGroup(b, start)
}

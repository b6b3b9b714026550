package flow

import (
	"strconv"
	"time"
)

// DNSFields are the "dns" feature's part of a Record: the last DNS message
// seen on the flow (a query on the client's flow, with the answer's latency
// and code; or an answer on the server's flow when its query was not seen).
type DNSFields struct {
	DNSID            uint16        // transaction id
	DNSFlags         uint16        // the header's flags word (QR, opcode, AA, TC, RD, RA, rcode)
	DNSRcode         uint8         // response code (the flags' low 4 bits of the answer)
	DNSName          string        // the query name, dotted ("example.com"), at most 64 bytes of wire format
	DNSNameTruncated bool          // the name was longer than what the kernel copies
	DNSLatency       time.Duration // query to answer, last in the period; 0: no answer seen
	DNSLatencyMax    time.Duration
	DNSTimeout       bool // a query went unanswered longer than --dns-timeout
}

var dnsGroup = Group{
	Name: "dns",
	JSONFields: []string{"dns_id", "dns_flags", "dns_rcode", "dns_name", "dns_name_truncated",
		"dns_latency_ns", "dns_latency_max_ns", "dns_timeout"},
	Sample: func(r *Record) {
		r.DNSFields = DNSFields{DNSID: 0x1234, DNSFlags: DNSFlagQR | DNSFlagRD | DNSFlagRA | 3, DNSRcode: 3,
			DNSName: "example.com", DNSNameTruncated: true, DNSLatency: 2 * time.Millisecond,
			DNSLatencyMax: 5 * time.Millisecond, DNSTimeout: true}
	},
	Has: func(r *Record) bool { return r.HasDNS() },
}

// HasDNS reports whether the record carries any DNS field (feature "dns"):
// a query or an answer was seen on the flow, or a query timed out.
func (g *DNSFields) HasDNS() bool {
	return g.DNSID != 0 || g.DNSFlags != 0 || g.DNSRcode != 0 || g.DNSName != "" || g.DNSNameTruncated ||
		g.DNSLatency != 0 || g.DNSLatencyMax != 0 || g.DNSTimeout
}

// DNSAnswered reports whether the record's DNS fields describe an answer:
// the last message seen is a response (QR set in DNSFlags: an answer on the
// server's flow), or a query whose answer was seen (DNSLatency > 0). Only
// then does DNSRcode mean something; a query without an answer has rcode 0,
// which is not NOERROR.
func (g *DNSFields) DNSAnswered() bool {
	return g.DNSFlags&DNSFlagQR != 0 || g.DNSLatency > 0
}

// appendJSON appends the dns_* fields of a flow with a DNS message seen
// only. dns_rcode is a name (DNSRcodeName), "" while no answer was seen (a
// query's rcode 0 is not NOERROR); dns_name is JSON-escaped, since a label
// can hold any byte.
func (g *DNSFields) appendJSON(b []byte) []byte {
	if !g.HasDNS() {
		return b
	}
	b = appendUint(b, `,"dns_id":`, uint64(g.DNSID))
	b = appendUint(b, `,"dns_flags":`, uint64(g.DNSFlags))
	b = append(b, `,"dns_rcode":"`...)
	if g.DNSAnswered() {
		b = appendDNSRcodeName(b, g.DNSRcode)
	}
	b = append(b, `","dns_name":`...)
	b = appendJSONString(b, g.DNSName)
	b = append(b, `,"dns_name_truncated":`...)
	b = strconv.AppendBool(b, g.DNSNameTruncated)
	b = appendUint(b, `,"dns_latency_ns":`, uint64(g.DNSLatency))
	b = appendUint(b, `,"dns_latency_max_ns":`, uint64(g.DNSLatencyMax))
	b = append(b, `,"dns_timeout":`...)
	return strconv.AppendBool(b, g.DNSTimeout)
}

// DNS header flag bits of Record.DNSFlags (RFC 1035 4.1.1): the flags word is
// QR(1) Opcode(4) AA(1) TC(1) RD(1) RA(1) Z(1) AD(1) CD(1) RCODE(4).
const (
	DNSFlagQR uint16 = 0x8000 // a response (0: a query)
	DNSFlagAA uint16 = 0x0400 // authoritative answer
	DNSFlagTC uint16 = 0x0200 // truncated message
	DNSFlagRD uint16 = 0x0100 // recursion desired
	DNSFlagRA uint16 = 0x0080 // recursion available
)

// DNSMaxWireName is how many bytes of a query name's wire format the kernel
// copies (feature "dns"); a longer name is reported truncated.
const DNSMaxWireName = 64

// dnsRcodeNames are the IANA DNS RCODE names for the 4-bit header code
// (RFC 6895, DNS Stateful Operations' DSOTYPENI = 11); codes 12-15 are
// unassigned and written "RCODE%d".
var dnsRcodeNames = [16]string{
	"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED",
	"YXDOMAIN", "YXRRSET", "NXRRSET", "NOTAUTH", "NOTZONE", "DSOTYPENI",
	"RCODE12", "RCODE13", "RCODE14", "RCODE15",
}

// DNSRcodeName is the name of a DNS response code: "NOERROR", "NXDOMAIN",
// "SERVFAIL" ..., "DSOTYPENI" for 11, and "RCODE%d" for a code without a
// name. The header's 4-bit codes (all the kernel reports) map to constant
// strings, so the result is a bounded set usable as a metric label.
func DNSRcodeName(c uint8) string {
	if int(c) < len(dnsRcodeNames) {
		return dnsRcodeNames[c]
	}
	return "RCODE" + strconv.Itoa(int(c))
}

// appendDNSRcodeName appends DNSRcodeName(c) without allocating.
func appendDNSRcodeName(b []byte, c uint8) []byte {
	if int(c) < len(dnsRcodeNames) {
		return append(b, dnsRcodeNames[c]...)
	}
	b = append(b, "RCODE"...)
	return strconv.AppendUint(b, uint64(c), 10)
}

// DNSNameFromWire turns the query name the kernel copied (feature "dns") into
// its dotted text form: b holds the QNAME in wire format, length-prefixed
// labels ending with a zero-length label, at most DNSMaxWireName bytes and
// zero-padded after the name.
//
//   - "\x07example\x03com\x00" is "example.com"; "\x00" alone is "." (the
//     root). Nothing after the terminating zero counts.
//   - truncated is true when the name does not end within b: a label that
//     runs past the end of b (its available bytes are kept), or no
//     terminating zero. A compression pointer (0xc0), which cannot occur in a
//     question's name, or another label type (0x40, 0x80) also ends the name
//     as truncated. The labels before are kept.
//   - An empty b is "", not truncated: nothing was copied.
//
// Labels are written in DNS presentation format (RFC 1035 5.1, as dig
// prints them), so that the name is always printable ASCII (valid UTF-8 for
// the protobuf string) and unambiguous: a '.' or '\' inside a label is
// escaped as "\." and "\\", a byte outside '!'..'~' (space, control
// characters, bytes >= 0x80) as "\DDD" (three decimal digits). Case is kept.
func DNSNameFromWire(b []byte) (name string, truncated bool) {
	return DNSNameFromWireReuse("", b)
}

// DNSNameFromWireReuse is DNSNameFromWire that returns prev, allocating
// nothing, when the name is prev: a caller that refills the same Record
// passes its DNSName, so a flow that keeps asking for one name costs no
// allocation per eviction. Otherwise the name is one allocation.
func DNSNameFromWireReuse(prev string, b []byte) (name string, truncated bool) {
	if len(b) == 0 {
		return "", false
	}
	// At most 4 text bytes per wire byte ("\DDD"), for any length of b.
	var stack [4 * DNSMaxWireName]byte
	out := stack[:0]
	if len(b) > DNSMaxWireName {
		out = make([]byte, 0, 4*len(b))
	}
	out, truncated = appendDNSName(out, b)
	switch {
	case len(out) == 0 && !truncated:
		return ".", false
	case string(out) == prev:
		return prev, truncated
	}
	return string(out), truncated
}

// appendDNSName appends the text of wire name b (DNSNameFromWire without
// the root's ".").
func appendDNSName(out, b []byte) ([]byte, bool) {
	for i := 0; ; {
		if i >= len(b) {
			return out, true // no terminating zero
		}
		l := int(b[i])
		i++
		if l == 0 {
			return out, false
		}
		if l&0xc0 != 0 {
			return out, true // compression pointer or extended label type
		}
		if len(out) > 0 {
			out = append(out, '.')
		}
		end := i + l
		if end > len(b) {
			for _, c := range b[i:] {
				out = appendDNSLabelByte(out, c)
			}
			return out, true // the label runs past the end
		}
		for _, c := range b[i:end] {
			out = appendDNSLabelByte(out, c)
		}
		i = end
	}
}

func appendDNSLabelByte(b []byte, c byte) []byte {
	switch {
	case c == '.' || c == '\\':
		return append(b, '\\', c)
	case c < '!' || c > '~':
		return append(b, '\\', '0'+c/100, '0'+c/10%10, '0'+c%10)
	}
	return append(b, c)
}

package flow

import (
	"net/netip"
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends r as one JSON object (no newline) with the field names
// of the agent's JSON output, which are a public contract: src_addr,
// dst_addr, src_port, dst_port, proto, icmp_type, icmp_code, bytes, packets,
// tcp_flags, eth_type, dscp, src_mac, dst_mac, start_time, end_time,
// interfaces[{name,ifindex,netns,direction}], for a flow seen in a tunnel
// tunnel_type, tunnel_src_addr, tunnel_dst_addr and tunnel_vni (Tunnel),
// src_dns_name and dst_dns_name when set,
// sampling, partial, then each
// group's fields (Groups, in order; each appender says when it writes
// them): drop_*, rtt_ns and rtt_max_ns, retransmits, for translated flows
// only (Translated) the xlat_* fields, and for flows with TLS fields only
// (HasTLS) tls_version, tls_cipher_suite, tls_group (names: TLSVersionName,
// TLSCipherSuiteName, TLSGroupName), tls_client_hello and quic, and for
// flows with DNS fields only (HasDNS) dns_id, dns_flags, dns_rcode
// (DNSRcodeName; "" until an answer is seen), dns_name, dns_name_truncated,
// dns_latency_ns, dns_latency_max_ns and dns_timeout. It is hand-written so
// that encoding a flow allocates nothing when b has room.
func (r *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"src_addr":"`...)
	b = r.SrcAddr.AppendTo(b)
	b = append(b, `","dst_addr":"`...)
	b = r.DstAddr.AppendTo(b)
	b = appendUint(b, `","src_port":`, uint64(r.SrcPort))
	b = appendUint(b, `,"dst_port":`, uint64(r.DstPort))
	b = appendUint(b, `,"proto":`, uint64(r.Proto))
	b = appendUint(b, `,"icmp_type":`, uint64(r.IcmpType))
	b = appendUint(b, `,"icmp_code":`, uint64(r.IcmpCode))
	b = appendUint(b, `,"bytes":`, r.Bytes)
	b = appendUint(b, `,"packets":`, r.Packets)
	b = appendUint(b, `,"tcp_flags":`, uint64(r.TCPFlags))
	b = appendUint(b, `,"eth_type":`, uint64(r.EthType))
	b = appendUint(b, `,"dscp":`, uint64(r.DSCP))
	b = append(b, `,"src_mac":"`...)
	b = appendMAC(b, r.SrcMAC)
	b = append(b, `","dst_mac":"`...)
	b = appendMAC(b, r.DstMAC)
	b = append(b, `","start_time":"`...)
	b = appendTime(b, r.StartTime)
	b = append(b, `","end_time":"`...)
	b = appendTime(b, r.EndTime)
	b = append(b, `","interfaces":[`...)
	for i, it := range r.Interfaces {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendQuote(b, it.Name)
		b = appendUint(b, `,"ifindex":`, uint64(it.Ifindex))
		b = append(b, `,"netns":`...)
		b = appendQuote(b, it.Netns)
		b = append(b, `,"direction":"`...)
		b = append(b, it.Direction.String()...)
		b = append(b, `"}`...)
	}
	b = append(b, ']')
	if r.IfacesOverflow {
		b = append(b, `,"interfaces_overflow":true`...)
	}
	if r.FragUnmatched {
		b = append(b, `,"frag_unmatched":true`...)
	}
	b = r.Tunnel.appendJSON(b)
	b = r.appendDNSNames(b)
	if r.L4Unread {
		b = append(b, `,"l4_unread":true`...)
	}
	if r.ExtUnread {
		b = append(b, `,"ext_unread":true`...)
	}
	b = appendUint(b, `,"sampling":`, uint64(r.Sampling))
	b = append(b, `,"partial":`...)
	b = strconv.AppendBool(b, r.Partial)
	// The feature groups in Groups' order, each called by name here rather
	// than through Groups or a helper: an indirect call per group and flow
	// cost the exporters some 15 ns per flow, a helper a few per cent.
	// groupgen json: generated to its end line by make generate. DO NOT EDIT.
	b = r.DropsFields.appendJSON(b)
	b = r.RTTFields.appendJSON(b)
	b = r.RetransmitsFields.appendJSON(b)
	b = r.XlatFields.appendJSON(b)
	b = r.TLSFields.appendJSON(b)
	b = r.DNSFields.appendJSON(b)
	b = r.TCPFields.appendJSON(b)
	// groupgen json: end.
	return append(b, '}')
}

func appendUint(b []byte, prefix string, v uint64) []byte {
	b = append(b, prefix...)
	return strconv.AppendUint(b, v, 10)
}

// appendAddr appends a as text, an IPv4-mapped IPv6 address as plain IPv4
// (the form src_addr has); nothing for the zero Addr.
func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return b
	}
	return a.Unmap().AppendTo(b)
}

// appendQuote is appendJSONString with a fast path for the usual interface
// names, namespaces and causes: printable ASCII with neither '"' nor a
// backslash is appended between quotes as it is.
func appendQuote(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return appendJSONString(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendJSONString appends s as a JSON string as AppendJSON writes names:
// valid JSON, no raw control character (appendJSONString). For the JSON
// that extends a record's (the collector's node_name, Kubernetes names).
func AppendJSONString(b []byte, s string) []byte { return appendQuote(b, s) }

// appendJSONString appends s as a JSON string that is also safe on a
// terminal: quotes and backslashes escaped, control characters (C0, DEL,
// C1) as \n, \r, \t or \u00XX, U+2028 and U+2029 (JavaScript line ends)
// and the bidirectional overrides and isolates (U+202A to U+202E, U+2066
// to U+2069: they reorder a terminal's line) as \u20XX, invalid UTF-8 replaced by U+FFFD like
// encoding/json; it allocates nothing. Names come from the network and
// from other tenants (interface names, netns, drop causes, DNS names):
// strconv.AppendQuote would write \x1b, which is not JSON.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != 0x7f {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r >= 0x80 && r <= 0x9f: // C1: 0x9b is CSI to some terminals
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
		case r == '\u2028' || r == '\u2029' || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069'):
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', hexDigits[r>>4&0xf], hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

func appendMAC(b []byte, mac [6]byte) []byte {
	for i, x := range mac {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hexDigits[x>>4], hexDigits[x&0xf])
	}
	return b
}

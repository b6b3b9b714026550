package main

// The features inside the TC programs (issue #15): xlat (bpf/xlat.h, the
// conntrack kfunc on a flow's first packets at its counting hook) and tls
// (bpf/tls.h, a look at the first six bytes of every TCP/UDP payload, a
// ServerHello parsed). Each is a load-time constant (xlat_on, tls_on), set
// as the agent sets it (datapath.Config.TCConstants).
//
// IPv4, one datapath with the feature on and one with it off (today's
// paths), both with the enrichment maps sized as the agent sizes them when
// a feature is on; every case runs the floor, the "off" program and the
// "on" program back to back in each repetition, so ×off is a median of
// per-repetition ratios. The cases:
//
//	tls  tcp-other    exist-hot, a TCP segment with 100 bytes that are not TLS
//	                  (the per-packet look: "other packets")
//	tls  server-hello exist-hot, a TLS 1.3 ServerHello (supported_versions
//	                  0x0304, TLS_AES_128_GCM_SHA256, key_share x25519),
//	                  parsed on every run; checked in the enrichment map
//	tls  quic         exist-hot, a UDP QUIC v1 Initial (long header), 1200 bytes
//	xlat steady       exist-hot after the flow's first packets (a flag and
//	                  packet-count test)
//	xlat post-nat     exist-hot, the packet seen after NAT at its flow's
//	                  counting hook (not certainly first: a forwarded
//	                  packet): its own key finds the alias in the flow map
//	                  (bpf/xlat.h), which names its flow's key before NAT;
//	                  the first run delegates the counting to the alias
//	                  (xlat_delegate, with the flow's note), the others are
//	                  counted there (issue #29): a counting post-NAT
//	                  observation's per-packet extra
//	xlat post-nat-follow  the same with the alias's delegation decided and
//	                  not made (FLOW_F_XLAT_DONE, as a hand-over leaves it):
//	                  every run follows the alias to the flow (one lookup
//	                  more), the path before the delegation
//	xlat post-nat-listed  the same at a hook the flow lists (steady), which
//	                  the alias lists too: a listed post-NAT observation's
//	                  per-packet extra
//	xlat post-nat-first  the same at a counting hook that is certainly first
//	                  (a host-network client's egress after an OUTPUT DNAT):
//	                  the alias counts its packets itself (bpf/xlat.h,
//	                  xlat_delegate), as the programs leave it after the
//	                  hook's first packets in a generation
//	xlat new          each run the first packet of a new flow (the driver
//	                  rewrites the source address): the conntrack lookup.
//	                  BPF_PROG_TEST_RUN's skb has no conntrack entry, so this
//	                  is a lookup that misses (the flow is looked up again on
//	                  its next packets, up to XLAT_TRIES).
//	dns  udp-other    exist-hot, UDP to port 8125 (not a DNS port), 64 bytes:
//	                  the port compare only ("other packets")
//	dns  query        exist-hot, a query 10.0.0.0:40000 → 10.100.0.1:53 (id
//	                  0x1234, RD, "www.example.com" A IN). The first run puts
//	                  it in dns_pending; the repeats find it there (the
//	                  BPF_NOEXIST insert fails), then id, flags and name into
//	                  the flow's enrichment entry: a retransmitted query's path
//	dns  query-new    each run a new client's query (the driver rewrites the
//	                  source, 10.0.0.i): the real insert into dns_pending and
//	                  a new enrichment entry; the pending entries are removed
//	                  after each repetition (runs under the table's size)
//	dns  answer       exist-hot, its answer 10.100.0.1:53 → 10.0.0.0:40000
//	                  (same id, QR RD RA NOERROR, the question and one A
//	                  record). The warm-up sends the query then the answer,
//	                  which matches it and deletes the pending entry, so the
//	                  repeats measure an UNMATCHED answer (the lookup misses)
//	dns  answer-match each run the answer to a pending query: new path, the
//	                  driver rewrites the answer's source (the server, 10.0.0.i)
//	                  and before every repetition the bench inserts the
//	                  matching dns_pending entries and the query flows'
//	                  enrichment entries; runs per repetition stay under the
//	                  table's 16384 entries. Each run also creates the answer's
//	                  flow (off does too), so ×off is diluted: read the ns.
//
// "dns-xlat" (opt-in, -tc-features dns-xlat) runs dns's udp-other, query
// and answer with xlat on too (bpf/xlatkey.h): its "on" figure minus dns's
// is what xlat adds to a packet (issue #29); and udp-learned, udp-other
// with a port learned behind a listed one (bpf/dns.h, dns_nat_ports): the
// per-packet cost of a Service's DNS port mapped to another.
//
// "netns" is not a feature but how the programs learn the interface's
// namespace: "on" is the one set shared by every namespace, which reads
// the device's (skb->dev->nd_net.net->net_cookie), "off" the fallback, one
// set per namespace with the cookie as a constant
// (datapath.Config.ForcePerNamespacePrograms):
//
//	netns exist-hot   exist-hot TCP ACK (the per-packet read)
//
// "overlay" (bpf/tunnel.h) compares two packets rather than two programs:
//
//	overlay udp-inner exist-hot UDP, 64 bytes (the inner packet alone)
//	overlay vxlan     exist-hot, the same packet in VXLAN: read through to
//	                  its inner flow on every run
//	netns new         each run a new flow's first packet
//
// "overlay-outer" (--overlay-outer-flows) compares the same packets with
// and without overlay_outer_on:
//
//	overlay-outer udp-inner  exist-hot UDP, no tunnel
//	overlay-outer vxlan      exist-hot VXLAN, its tunnel flow counted too

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature/dns"
	"github.com/flowlens/flowlens/internal/agent/feature/tcp"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	frames "github.com/flowlens/flowlens/internal/testkit/packet"
)

// featRow is one feature × packet case. The embedded row carries the "on"
// program's and the floor's figures as in "datapath".
type featRow struct {
	row
	Feature string `json:"feature"` // "tls", "xlat" or "dns"
	Case    string `json:"case"`
	// Kind: "own" (a packet of the feature's kind: a hello, a flow's first
	// packet) or "other" (the per-packet cost on every other packet).
	Kind string `json:"kind"`
	// Off is the same packets through the datapath with the feature off,
	// in the same repetitions; VsOff the median of the per-repetition
	// ratios on/off, VsOffMin and VsOffMax their extremes.
	Off      stat    `json:"off"`
	OffRatio float64 `json:"off_ratio"` // off/floor, median of per-repetition ratios
	VsOff    float64 `json:"vs_off"`
	VsOffMin float64 `json:"vs_off_min"`
	VsOffMax float64 `json:"vs_off_max"`
	// Check is what was verified after the run (enrichment entry, flags).
	Check string `json:"check,omitempty"`
}

// featCase describes one case.
type featCase struct {
	feature, name, kind string
	constant            string
	pkt                 []byte
	pre                 []byte // sent once before the warm-up (dns answer: its query)
	newPath             bool   // each run a new flow (driver), else exist-hot
	dnsMatch            bool   // dns answer-match: pending queries inserted before each repetition
	dnsNewQuery         bool   // dns query-new: the pending entries removed after each repetition
	warm                int    // runs before measuring (exist-hot)
	postNAT             bool   // xlat post-nat: on, the flow moves to another key, which an alias names
	postNATListed       bool   // xlat post-nat-listed: and the flow lists this hook as steady, as the alias does
	postNATFirst        bool   // xlat post-nat-first: and the alias counts for the flow (xlat_delegate)
	postNATFollow       bool   // xlat post-nat-follow: the alias's delegation decided, not made
	dnsLearned          bool   // dns-xlat udp-learned: on, a port learned behind a listed one (dns_nat_ports)
	note                string
}

// postNATPort is the destination port of the post-nat case's flow key
// before NAT (the packet's is 80).
const postNATPort = 8080

const (
	flowXlatDone = 4 // FLOW_F_XLAT_DONE (bpf/types.h)
	xlatTries    = 4 // XLAT_TRIES (bpf/xlat.h)
)

func featCases(features []string) []featCase {
	var out []featCase
	if slices.Contains(features, "tls") {
		out = append(out,
			featCase{feature: "tls", name: "tcp-other", kind: "other", constant: "tls_on", pkt: tcpPacket(100), warm: 1,
				note: "exist-hot TCP, 100-byte payload that is not TLS"},
			featCase{feature: "tls", name: "server-hello", kind: "own", constant: "tls_on", pkt: serverHelloPacket(), warm: 1,
				note: "exist-hot TCP ServerHello (TLS 1.3, AES-128-GCM, x25519), parsed every run"},
			featCase{feature: "tls", name: "quic", kind: "own", constant: "tls_on", pkt: quicPacket(), warm: 1,
				note: "exist-hot UDP QUIC v1 Initial, 1200 bytes"})
	}
	if slices.Contains(features, "xlat") {
		out = append(out,
			featCase{feature: "xlat", name: "steady", kind: "other", constant: "xlat_on", pkt: packet("ipv4"), warm: xlatTries + 1,
				note: "exist-hot after the flow's first packets: a flag and count test"},
			featCase{feature: "xlat", name: "post-nat", kind: "own", constant: "xlat_on", pkt: packet("ipv4"), warm: xlatTries + 1, postNAT: true,
				note: "exist-hot, a packet after NAT at its flow's counting hook: the alias under its key names the flow's key before NAT (off: the packet's own flow)"},
			featCase{feature: "xlat", name: "post-nat-follow", kind: "own", constant: "xlat_on", pkt: packet("ipv4"), warm: xlatTries + 1, postNAT: true, postNATFollow: true,
				note: "exist-hot, a packet after NAT at its flow's counting hook, the alias's delegation decided and not made (a hand-over took it back): the alias followed to the flow (off: the packet's own flow)"},
			featCase{feature: "xlat", name: "post-nat-first", kind: "own", constant: "xlat_on", pkt: packet("ipv4"), warm: xlatTries + 1, postNAT: true, postNATFirst: true,
				note: "exist-hot, a packet after NAT at a certainly-first counting hook: the alias under its key counts it for the flow (off: the packet's own flow)"},
			featCase{feature: "xlat", name: "post-nat-listed", kind: "own", constant: "xlat_on", pkt: packet("ipv4"), warm: xlatTries + 1, postNAT: true, postNATListed: true,
				note: "exist-hot, a packet after NAT at a hook its flow lists (steady), which the alias under its key lists too (off: the packet's own flow)"},
			featCase{feature: "xlat", name: "new", kind: "own", constant: "xlat_on", pkt: packet("ipv4"), newPath: true,
				note: "each run a new flow's first packet: conntrack lookup (a miss: no conntrack entry under BPF_PROG_TEST_RUN)"})
	}
	if slices.Contains(features, "dns") {
		out = append(out,
			featCase{feature: "dns", name: "udp-other", kind: "other", pkt: udpPacket(8125, 64), warm: 1,
				note: "exist-hot UDP to port 8125, 64 bytes: the port compare only"},
			featCase{feature: "dns", name: "query", kind: "own", pkt: dnsQueryPacket(), warm: 1,
				note: "exist-hot DNS query www.example.com A (pending entry found after the first run: a retransmission's path)"},
			featCase{feature: "dns", name: "query-new", kind: "own", pkt: dnsQueryPacket(), newPath: true, dnsNewQuery: true,
				note: "each run a new client's query (inserted into dns_pending); new path: a new flow each run, off too"},
			featCase{feature: "dns", name: "answer", kind: "own", pkt: dnsAnswerPacket("10.100.0.1"), pre: dnsQueryPacket(), warm: 1,
				note: "exist-hot DNS answer; matched in the warm-up only, so the runs measure an unmatched answer"},
			featCase{feature: "dns", name: "answer-match", kind: "own", pkt: dnsAnswerPacket("10.0.0.0"), newPath: true, dnsMatch: true,
				note: "each run an answer matching a pending query (inserted before each repetition); new path: a new answer flow each run, off too"})
	}
	if slices.Contains(features, "dns-xlat") {
		// dns with xlat on too (issue #29: the inspections under the key
		// before NAT, bpf/xlatkey.h): against "off" (neither), as dns's
		// cases; the difference of the two "on" figures is what xlat adds
		// to a DNS packet (its key resolved: one flow map lookup; an
		// unmatched answer, one xlat_alias lookup more).
		out = append(out,
			featCase{feature: "dns-xlat", name: "udp-other", kind: "other", pkt: udpPacket(8125, 64), warm: xlatTries + 1,
				note: "exist-hot UDP to port 8125, dns and xlat on, no port learned behind a listed one: the port compare and one load"},
			featCase{feature: "dns-xlat", name: "udp-learned", kind: "other", pkt: udpPacket(8125, 64), warm: xlatTries + 1, dnsLearned: true,
				note: "the same with port 5353 learned behind a listed one (dns_nat_ports, bpf/dns.h): its compares too"},
			featCase{feature: "dns-xlat", name: "query", kind: "own", pkt: dnsQueryPacket(), warm: xlatTries + 1,
				note: "dns query, xlat on: the flow map lookup of xlat_inspect_key (the key is a flow, not an alias)"},
			featCase{feature: "dns-xlat", name: "answer", kind: "own", pkt: dnsAnswerPacket("10.100.0.1"), pre: dnsQueryPacket(), warm: xlatTries + 1,
				note: "dns unmatched answer, xlat on: the key's lookup, and xlat_alias's for its query (a miss)"})
	}
	if slices.Contains(features, "overlay") {
		// Both read through the tunnel (the inner keying is not a feature);
		// overlay_on adds the tunnel to the enrichment entry, on a flow's
		// first packets only. vxlan's ns minus udp-inner's is the tunnel's
		// per-packet cost.
		out = append(out,
			featCase{feature: "overlay", name: "udp-inner", kind: "other", constant: "overlay_on", pkt: udpPacket(5000, 64), warm: 1,
				note: "exist-hot UDP 10.0.0.0:40000 -> 10.100.0.1:5000, 64 bytes: the inner packet alone"},
			featCase{feature: "overlay", name: "vxlan", kind: "own", constant: "overlay_on", pkt: vxlanPacket(), warm: 1,
				note: "exist-hot, the same packet in VXLAN (UDP 4789, VNI 42): keyed on the inner flow every run"})
	}
	if slices.Contains(features, "tcp") {
		out = append(out, tcpCases()...)
	}
	if slices.Contains(features, "overlay-outer") {
		// --overlay-outer-flows: the tunnel flow counted apart
		// (flowlens_tunnel_outer), on tunnel packets only; the maps sized
		// in both runs, overlay_outer_on set in the "on" one.
		out = append(out,
			featCase{feature: "overlay-outer", name: "udp-inner", kind: "other", constant: datapath.OverlayOuterConstant, pkt: udpPacket(5000, 64), warm: 1,
				note: "exist-hot UDP, 64 bytes, no tunnel: what other packets pay"},
			featCase{feature: "overlay-outer", name: "vxlan", kind: "own", constant: datapath.OverlayOuterConstant, pkt: vxlanPacket(), warm: 1,
				note: "exist-hot VXLAN packet: read through, and with the option its tunnel flow's entry updated"})
	}
	if slices.Contains(features, "netns") {
		out = append(out,
			featCase{feature: "netns", name: "exist-hot", kind: "other", pkt: packet("ipv4"), warm: 1,
				note: "exist-hot TCP ACK: the device's netns cookie read (shared programs) vs a constant (one set per namespace)"},
			featCase{feature: "netns", name: "new", kind: "other", pkt: packet("ipv4"), newPath: true,
				note: "each run a new flow's first packet, shared programs vs one set per namespace"})
	}
	return out
}

// vxlanPacket is udpPacket(5000, 64) inside VXLAN, node 192.168.0.1 ->
// 192.168.0.2, VNI 42.
func vxlanPacket() []byte {
	inner := udpPacket(5000, 64)
	body := frames.Cat(frames.UDP(51000, 4789, 8+len(inner))[:frames.UDPLen], []byte{8, 0, 0, 0, 0, 0, 42, 0}, inner)
	return frames.Cat(frames.Eth(frames.EtherTypeIPv4), frames.IPv4(frames.ProtoUDP, "192.168.0.1", "192.168.0.2", len(body)), body)
}

// udpPacket is 10.0.0.0:40000 → 10.100.0.1:dport with n bytes of payload.
func udpPacket(dport uint16, n int) []byte {
	u := frames.UDP(40000, dport, n)
	for i := frames.UDPLen; i < len(u); i++ {
		u[i] = byte('a' + i%26)
	}
	return frames.Cat(frames.Eth(frames.EtherTypeIPv4), frames.IPv4(frames.ProtoUDP, "10.0.0.0", "10.100.0.1", len(u)), u)
}

// DNS message values (RFC 1035).
const (
	dnsID       = 0x1234
	dnsQueryRD  = 0x0100     // a query, recursion desired
	dnsAnswerFl = 0x8180     // QR, RD, RA, NOERROR
	dnsPort     = 53         // the default dns_ports
	dnsClient   = 40000      // the client's port
	dnsAnswerIP = 0x5db8d822 // 93.184.216.34
)

// dnsQName is "www.example.com" as on the wire.
var dnsQName = []byte("\x03www\x07example\x03com\x00")

// dnsMessage builds a DNS message: the header, the question (A IN) and, for
// an answer, one A record whose name points at the question's.
func dnsMessage(answer bool) []byte {
	u16 := func(b []byte, v int) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }
	m := u16(nil, dnsID)
	an := 0
	if answer {
		m, an = u16(m, dnsAnswerFl), 1
	} else {
		m = u16(m, dnsQueryRD)
	}
	m = u16(m, 1)  // qdcount
	m = u16(m, an) // ancount
	m = u16(m, 0)  // nscount
	m = u16(m, 0)  // arcount
	m = append(m, dnsQName...)
	m = u16(m, 1) // QTYPE A
	m = u16(m, 1) // QCLASS IN
	if answer {
		m = u16(m, 0xc00c) // the name: a pointer to the question's (offset 12)
		m = u16(m, 1)
		m = u16(m, 1)
		m = binary.BigEndian.AppendUint32(m, 300) // TTL
		m = u16(m, 4)
		m = binary.BigEndian.AppendUint32(m, dnsAnswerIP)
	}
	return m
}

// dnsQueryPacket is the query 10.0.0.0:40000 → 10.100.0.1:53.
func dnsQueryPacket() []byte {
	m := dnsMessage(false)
	u := frames.UDP(dnsClient, dnsPort, len(m))
	copy(u[frames.UDPLen:], m)
	return frames.Cat(frames.Eth(frames.EtherTypeIPv4), frames.IPv4(frames.ProtoUDP, "10.0.0.0", "10.100.0.1", len(u)), u)
}

// dnsAnswerPacket is the answer from server:53 to client:40000 where the
// client is 10.0.0.0 or 10.100.0.1 (answer-match: the driver rewrites the
// source, the server, 10.0.0.i).
func dnsAnswerPacket(server string) []byte {
	client := "10.0.0.0"
	if server == "10.0.0.0" {
		client = "10.100.0.1"
	}
	m := dnsMessage(true)
	u := frames.UDP(dnsPort, dnsClient, len(m))
	copy(u[frames.UDPLen:], m)
	return frames.Cat(frames.Eth(frames.EtherTypeIPv4), frames.IPv4(frames.ProtoUDP, server, client, len(u)), u)
}

// dnsPendingKey is struct dns_pending_key (bpf/types.h).
type dnsPendingKey struct {
	Key datapath.FlowKey
	ID  uint16
	Pad [6]uint8
}

// reverse is the query's flow of an answer's.
func reverse(k datapath.FlowKey) datapath.FlowKey {
	r := k
	r.SrcIp, r.DstIp, r.SrcPort, r.DstPort = k.DstIp, k.SrcIp, k.DstPort, k.SrcPort
	return r
}

// dnsPending is the answer-match state: the pending queries of the answers
// the driver sends, re-inserted before each repetition.
type dnsPending struct {
	pk      []dnsPendingKey
	qk      []datapath.FlowKey // the queries' flows
	ak      []datapath.FlowKey // the answers' flows
	matched int                // pending entries the runs consumed (query-new: inserted), summed
	// newQuery: the runs are queries (query-new); ak are their flows.
	newQuery bool
	runs     int
	answerd  int // query flows marked answered with a latency, summed
}

// fill inserts the pending queries and their flows' enrichment entries as
// the queries left them.
func (d *dnsPending) fill(f *featDP) error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return err
	}
	now := uint64(ts.Nano())
	vals := make([]datapath.DNSPendingValue, len(d.pk))
	for i := range vals {
		vals[i].QueryNs, vals[i].Flags = now, dnsQueryRD
	}
	if _, err := f.dp.Maps.DNSPending.BatchUpdate(d.pk, vals, nil); err != nil {
		return fmt.Errorf("dns_pending: %w", err)
	}
	var q datapath.EnrichValue
	q.DnsId, q.DnsFlags, q.DnsState, q.DnsQueryNs = dnsID, dnsQueryRD, datapath.DNSQuery, now
	copy(q.DnsName[:], dnsQName)
	ev := make([]datapath.EnrichValue, len(d.qk))
	for i := range ev {
		ev[i] = q
	}
	if _, err := f.dp.Maps.Enrich[f.gen&1].BatchUpdate(d.qk, ev, nil); err != nil {
		return fmt.Errorf("query flows' enrichment entries: %w", err)
	}
	return nil
}

// tally counts what the runs did: pending entries consumed, query flows
// answered; then removes the answers' enrichment entries.
func (d *dnsPending) tally(f *featDP) error {
	var ts datapath.DNSPendingValue
	if d.newQuery {
		for i := range d.pk {
			if err := f.dp.Maps.DNSPending.Lookup(&d.pk[i], &ts); err != nil {
				continue
			}
			d.matched++
			var v datapath.EnrichValue
			if err := f.dp.Maps.Enrich[f.gen&1].Lookup(&d.ak[i], &v); err == nil &&
				v.DnsState == datapath.DNSQuery && v.DnsId == dnsID && bytes.HasPrefix(v.DnsName[:], dnsQName) {
				d.answerd++
			}
		}
		d.runs += len(d.pk)
		if _, err := f.dp.Maps.DNSPending.BatchDelete(d.pk, nil); err != nil {
			return fmt.Errorf("pending queries: %w", err)
		}
		if _, err := f.dp.Maps.Enrich[f.gen&1].BatchDelete(d.ak, nil); err != nil {
			return fmt.Errorf("queries' enrichment entries: %w", err)
		}
		return nil
	}
	for i := range d.pk {
		if err := f.dp.Maps.DNSPending.Lookup(&d.pk[i], &ts); err == nil {
			continue
		}
		d.matched++
		var v datapath.EnrichValue
		if err := f.dp.Maps.Enrich[f.gen&1].Lookup(&d.qk[i], &v); err == nil &&
			v.DnsState&datapath.DNSAnswered != 0 && v.DnsLatencyNs > 0 && v.DnsFlags == dnsAnswerFl {
			d.answerd++
		}
	}
	d.runs += len(d.pk)
	// An answer matched to its query writes the query's entry; its own
	// flow has an entry only when something else of it was recorded, so
	// each key may be absent (a batch delete stops at the first).
	for i := range d.ak {
		if err := f.dp.Maps.Enrich[f.gen&1].Delete(&d.ak[i]); err != nil && !isKeyNotExist(err) {
			return fmt.Errorf("answers' enrichment entries: %w", err)
		}
	}
	return nil
}

// tcpPacket is packet("ipv4") with an n-byte payload that is not TLS.
func tcpPacket(n int) []byte {
	tcp := frames.TCP(40000, 80, frames.PSH|frames.ACK)
	payload := frames.Payload(n)
	for i := range payload {
		payload[i] = byte('a' + i%26) // an HTTP-like text body: no 0x16 0x03
	}
	return frames.Cat(frames.Eth(frames.EtherTypeIPv4), frames.IPv4(frames.ProtoTCP, "10.0.0.0", "10.100.0.1", len(tcp)+n), tcp, payload)
}

// TLS 1.3 ServerHello values (RFC 8446, IANA).
const (
	tlsVersion13   = 0x0304
	tlsAES128GCM   = 0x1301 // TLS_AES_128_GCM_SHA256
	tlsGroupX25519 = 0x001d
)

// serverHello builds a TLS 1.3 ServerHello record byte by byte, as a server
// sends it (RFC 8446 4.1.3): legacy_version 0x0303, a random, the client's
// 32-byte session id echoed, the cipher suite, null compression, then the
// extensions key_share (x25519, a 32-byte public key) and
// supported_versions (0x0304).
func serverHello() []byte {
	u16 := func(b []byte, v int) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }
	u24 := func(b []byte, v int) []byte { return append(b, byte(v>>16), byte(v>>8), byte(v)) }

	var ext []byte
	ext = u16(ext, 0x0033) // key_share
	ext = u16(ext, 2+2+32) // extension length
	ext = u16(ext, tlsGroupX25519)
	ext = u16(ext, 32) // key_exchange length
	for i := 0; i < 32; i++ {
		ext = append(ext, byte(0x9f^i*7))
	}
	ext = u16(ext, 0x002b) // supported_versions
	ext = u16(ext, 2)
	ext = u16(ext, tlsVersion13)

	var body []byte
	body = u16(body, 0x0303)  // legacy_version
	for i := 0; i < 32; i++ { // random (not the HelloRetryRequest value)
		body = append(body, byte(0x40+i*13))
	}
	body = append(body, 32) // legacy_session_id_echo
	for i := 0; i < 32; i++ {
		body = append(body, byte(0xa0+i))
	}
	body = u16(body, tlsAES128GCM)
	body = append(body, 0) // legacy_compression_method
	body = u16(body, len(ext))
	body = append(body, ext...)

	hs := []byte{2} // handshake type server_hello
	hs = u24(hs, len(body))
	hs = append(hs, body...)

	rec := []byte{0x16, 0x03, 0x03} // handshake record, legacy record version
	rec = u16(rec, len(hs))
	return append(rec, hs...)
}

// serverHelloPacket is the ServerHello from 10.100.0.1:443 to 10.0.0.0:40000.
func serverHelloPacket() []byte {
	tcp := frames.TCP(443, 40000, frames.PSH|frames.ACK)
	p := serverHello()
	return frames.Cat(frames.Eth(frames.EtherTypeIPv4), frames.IPv4(frames.ProtoTCP, "10.100.0.1", "10.0.0.0", len(tcp)+len(p)), tcp, p)
}

// quicPacket is a QUIC v1 Initial (RFC 9000 17.2.2) from 10.0.0.0:40000 to
// 10.100.0.1:443, padded to 1200 bytes of UDP payload as a client's is.
func quicPacket() []byte {
	const n = 1200
	p := []byte{0xc3, 0, 0, 0, 1}                   // long header, fixed bit, Initial, 4-byte packet number; version 1
	p = append(p, 8, 1, 2, 3, 4, 5, 6, 7, 8)        // DCID
	p = append(p, 8, 9, 10, 11, 12, 13, 14, 15, 16) // SCID
	p = append(p, 0)                                // token length
	rest := n - len(p) - 2
	p = append(p, 0x40|byte(rest>>8), byte(rest)) // length (2-byte varint)
	p = append(p, make([]byte, n-len(p))...)
	for i := len(p) - rest; i < n; i++ {
		p[i] = byte(i * 31)
	}
	return frames.Cat(frames.Eth(frames.EtherTypeIPv4), frames.IPv4(frames.ProtoUDP, "10.0.0.0", "10.100.0.1", frames.UDPLen+n),
		frames.UDP(40000, 443, n)[:frames.UDPLen], p) // UDP builds the header and n zero bytes
}

// featDP is one datapath of a case: its program as measured (a driver on
// the new path) and what the check needs.
type featDP struct {
	dp   *datapath.Datapath
	prog *ebpf.Program
	key  datapath.FlowKey // the measured flow (exist-hot) or the template key (new)
	// preKey is the flow of featCase.pre (dns answer: the query's).
	preKey datapath.FlowKey
	cur    *ebpf.Map
	gen    uint32
	done   []func()
}

func (f *featDP) Close() {
	for _, d := range slices.Backward(f.done) {
		d()
	}
	if f.dp != nil {
		f.dp.Close()
	}
}

// featRuns is the runs per repetition of a new-path case.
func featRuns(o options, c featCase) int {
	if c.dnsMatch || c.dnsNewQuery {
		return min(o.newFlows, 8192) // half dns_pending's 16384: no LRU eviction
	}
	return o.newFlows
}

func loadFeatDP(o options, c featCase, on bool) (*featDP, error) {
	cfg := datapath.Config{MaxFlows: uint32(o.newFlows + 16), Sampling: 1, Enrichment: true}
	var tc map[string]any
	switch c.feature {
	case "netns":
		cfg.ForcePerNamespacePrograms = !on
	case "dns", "dns-xlat":
		// As the agent sets them (internal/agent/feature/dns Plan): dns_on,
		// dns_ports {53}, dns_pending sized; the size for off too.
		h := dns.New().Plan(nil)
		tc, cfg.MapSizes = h.TC, h.MapSizes
		if c.feature == "dns-xlat" {
			tc = maps.Clone(tc)
			tc["xlat_on"] = uint32(1)
			if c.dnsLearned && on {
				tc["dns_nat_ports"] = [4]uint16{5353} // as after a host-network client's first query to 53 -> 5353
			}
		}
	case "tcp": // as the agent sets it: tcp_on, its maps sized (off too)
		h := tcp.New().Plan(nil)
		tc, cfg.MapSizes = h.TC, h.MapSizes
	case "overlay-outer":
		tc = map[string]any{c.constant: uint32(1)}
		cfg.MapSizes = map[string]uint32{}
		for _, m := range datapath.OverlayOuterMaps {
			cfg.MapSizes[m] = cfg.MaxFlows
		}
	default:
		tc = map[string]any{c.constant: uint32(1)}
	}
	if on {
		cfg.TCConstants = tc
	}
	dp, err := datapath.Load(cfg)
	if err != nil {
		return nil, err
	}
	f := &featDP{dp: dp}
	if err := watchLoopback(dp); err != nil {
		f.Close()
		return nil, err
	}
	if c.feature == "netns" && dp.SharedPrograms() != on {
		f.Close()
		return nil, fmt.Errorf("shared TC programs %v, want %v (this kernel refuses them?)", dp.SharedPrograms(), on)
	}
	progs, err := dp.ProgramsFor(0)
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := dp.Maps.Control.Lookup(uint32(0), &f.gen); err != nil {
		f.Close()
		return nil, err
	}
	f.cur = dp.Maps.Flows[f.gen&1]
	var preKey datapath.FlowKey
	if c.pre != nil {
		if _, err := progs.Ingress.Run(&ebpf.RunOptions{Data: c.pre}); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.cur.NextKey(nil, &preKey); err != nil {
			f.Close()
			return nil, fmt.Errorf("the first packet created no flow: %w", err)
		}
	}
	// The packet's flow: created by the first run, found again by the others.
	for i := 0; i < max(c.warm, 1); i++ {
		if _, err := progs.Ingress.Run(&ebpf.RunOptions{Data: c.pkt}); err != nil {
			f.Close()
			return nil, err
		}
	}
	var k datapath.FlowKey
	for it := f.cur.Iterate(); it.Next(&k, new(datapath.FlowValue)); {
		if c.pre == nil || k != preKey {
			f.key = k
			break
		}
	}
	if f.key == (datapath.FlowKey{}) {
		f.Close()
		return nil, fmt.Errorf("the warm-up run created no flow")
	}
	f.preKey = preKey
	f.prog = progs.Ingress
	if c.postNAT && on {
		// The flow as the hook before NAT keyed it, named by an alias of
		// another namespace's hook in this generation (believed as is).
		var v datapath.FlowValue
		if err := f.cur.Lookup(&f.key, &v); err != nil {
			f.Close()
			return nil, err
		}
		pre := f.key
		pre.DstPort = postNATPort
		// The alias as bpf/xlat.h's xlat_alias_put writes it (and
		// xlat_mirror, for a listed hook).
		to := datapath.XlatAlias{Key: pre, Netns: 1, Gen: f.gen}
		a := datapath.XlatFlowAlias{ListedOnly: 1, N_ifaces: 1, Flags: datapath.FlowFlagXlatAlias, To: to}
		if c.postNATListed {
			// Another hook counts the flow; this one is listed, steady.
			me := v.Ifaces[0]
			v.Ifaces[0] = datapath.IfaceObs{Netns: 1, Ifindex: 99, Dir: me.Dir}
			v.Ifaces[1] = me
			v.N_ifaces = 2
			v.ListedOnly = 1 << 1
			a.Ifaces[1] = me
			a.N_ifaces = 2
			a.ListedOnly |= 1 << 1
		}
		if c.postNATFollow {
			a.Flags |= flowXlatDone
		}
		if c.postNATFirst {
			// As xlat_delegate leaves them: the alias counts this hook,
			// with the flow's rule (flow_value.rule, offset 13, is the
			// alias's Pad[5]); the flow is marked Via.
			a.Ifaces[0], a.FirstDir, a.ListedOnly = v.Ifaces[0], v.FirstDir, 0
			a.Flags |= flowXlatDone
			a.Pad[5] = v.Rule
			v.Flags |= datapath.FlowFlagXlatVia
		}
		err := errors.Join(f.cur.Delete(&f.key), f.cur.Put(&pre, &v), f.cur.Put(&f.key, &a),
			dp.Maps.XlatAlias.Put(&f.key, &to))
		if err != nil {
			f.Close()
			return nil, err
		}
		f.preKey = pre
	}
	if c.newPath {
		// The template key: the driver rewrites its source address.
		if err := f.cur.Delete(&f.key); err != nil {
			f.Close()
			return nil, err
		}
		if c.dnsMatch || c.dnsNewQuery {
			_ = dp.Maps.Enrich[f.gen&1].Delete(&f.key) // the warm-up packet's
			_ = dp.Maps.DNSPending.Delete(&dnsPendingKey{Key: f.key, ID: dnsID})
		}
		d, closeD, err := driver(progs.Ingress, "ipv4", 1, featRuns(o, c))
		if err != nil {
			f.Close()
			return nil, err
		}
		f.done = append(f.done, closeD)
		f.prog = d
	}
	return f, nil
}

// runFeatures measures the cases of the named features.
func runFeatures(o options, features []string) ([]featRow, error) {
	var noop datapath.NoopObjects
	if err := datapath.LoadNoopObjects(&noop, nil); err != nil {
		return nil, err
	}
	defer noop.Close()
	var rows []featRow
	for _, c := range featCases(features) {
		r, err := runFeatCase(o, c, noop.Noop)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", c.feature, c.name, err)
		}
		rows = append(rows, r)
		fmt.Fprintf(os.Stderr, "  ipv4  %-4s %-12s on %7.2f ns/pkt  off %7.2f  floor %6.2f  ×%.2f  ×%.3f of off\n",
			c.feature, c.name, r.Prog.Median, r.Off.Median, r.Floor.Median, r.Ratio, r.VsOff)
	}
	return rows, nil
}

func runFeatCase(o options, c featCase, floor *ebpf.Program) (featRow, error) {
	path := "exist-hot"
	runs := o.existRuns
	if c.newPath {
		path, runs = "new", featRuns(o, c)
	}
	r := featRow{row: row{Family: "ipv4", Path: path, Flows: 1, Features: c.feature, Reps: o.reps, Runs: runs, Note: c.note},
		Feature: c.feature, Case: c.name, Kind: c.kind}
	off, err := loadFeatDP(o, c, false)
	if err != nil {
		return r, fmt.Errorf("load, %s off: %w", c.feature, err)
	}
	defer off.Close()
	on, err := loadFeatDP(o, c, true)
	if err != nil {
		return r, fmt.Errorf("load, %s on: %w", c.feature, err)
	}
	defer on.Close()

	var after func() error
	var pend *dnsPending
	if c.newPath {
		ks := keys(on.key, ipv4Base, 1, 1+runs)
		if c.dnsNewQuery {
			pend = &dnsPending{newQuery: true, ak: ks}
			for _, k := range ks {
				pend.pk = append(pend.pk, dnsPendingKey{Key: k, ID: dnsID})
			}
		}
		if c.dnsMatch {
			pend = &dnsPending{ak: ks}
			for _, k := range ks {
				q := reverse(k)
				pend.qk = append(pend.qk, q)
				pend.pk = append(pend.pk, dnsPendingKey{Key: q, ID: dnsID})
			}
			if err := pend.fill(on); err != nil {
				return r, err
			}
		}
		// Each side's new flows are keyed like its own first flow: the
		// shared programs and one set per namespace (netns) key them apart.
		ksOff := keys(off.key, ipv4Base, 1, 1+runs)
		after = func() error {
			for _, d := range []struct {
				f  *featDP
				ks []datapath.FlowKey
			}{{off, ksOff}, {on, ks}} {
				if _, err := d.f.cur.BatchDelete(d.ks, nil); err != nil {
					return err
				}
			}
			if pend != nil {
				if err := pend.tally(on); err != nil {
					return err
				}
				if pend.newQuery {
					return nil
				}
				return pend.fill(on)
			}
			return nil
		}
	}
	var before [2]datapath.Counters
	for i, f := range []*featDP{off, on} {
		if before[i], err = f.dp.ReadCounters(); err != nil {
			return r, err
		}
	}
	var cs caseSamples
	total := 0
	for attempt := 0; ; attempt++ {
		probe.waitOff(2 * time.Minute)
		cs, err = measureCase(floor, on.prog, c.pkt, runs, o.reps, after, off.prog, tcActUnspec)
		total += o.reps
		if err != nil {
			return r, err
		}
		if st := probe.on(); !st || attempt == 2 {
			r.StatsOn = st
			break
		}
	}
	// Sanity: flows created only on the new path, nothing overflowed.
	for i, f := range []*featDP{off, on} {
		cnt, err := f.dp.ReadCounters()
		if err != nil {
			return r, err
		}
		want := uint64(0)
		if c.newPath {
			want = uint64(total * runs)
		}
		if i == 1 && c.postNAT && !c.postNATListed && !c.postNATFirst && !c.postNATFollow {
			want = 1 // the flow's note, by the delegation (bpf/xlat.h)
		}
		if d := cnt[datapath.CounterNewFlows] - before[i][datapath.CounterNewFlows]; d != want {
			return r, fmt.Errorf("%s: %d flows created, want %d", onOff(i == 1), d, want)
		}
		if ov := cnt[datapath.CounterOverflowRecords] + cnt[datapath.CounterOverflowLost]; ov != 0 {
			return r, fmt.Errorf("%s: %d packets overflowed the flow map", onOff(i == 1), ov)
		}
	}
	if pend != nil && pend.newQuery {
		if pend.matched != pend.runs || pend.answerd != pend.runs {
			return r, fmt.Errorf("query-new: %d of %d queries pending, %d query flows recorded", pend.matched, pend.runs, pend.answerd)
		}
		r.Check = fmt.Sprintf("every run's query pending and recorded on its flow (%d of %d)", pend.matched, pend.runs)
	} else if pend != nil {
		if pend.matched != pend.runs || pend.answerd != pend.runs {
			return r, fmt.Errorf("answer-match: %d of %d pending queries matched, %d query flows answered", pend.matched, pend.runs, pend.answerd)
		}
		r.Check = fmt.Sprintf("every run matched a pending query (%d of %d consumed; query flows answered with a latency, flags %#04x)",
			pend.matched, pend.runs, dnsAnswerFl)
	} else if r.Check, err = checkFeature(c, off, on); err != nil {
		return r, err
	}
	r.Prog, r.Floor, r.Off = summarize(cs.pu, cs.pk), summarize(cs.fu, cs.fk), summarize(cs.nu, cs.nk)
	r.Ratio, r.OffRatio = median(cs.ratios), median(cs.nratios)
	r.Net = r.Prog.Median - r.Floor.Median
	r.VsOff, r.VsOffMin, r.VsOffMax = median(cs.vs), slices.Min(cs.vs), slices.Max(cs.vs)
	return r, nil
}

// checkFeature verifies the "on" datapath did what the case claims, and the
// "off" one nothing of it.
func checkFeature(c featCase, off, on *featDP) (string, error) {
	enrich := func(f *featDP) (datapath.EnrichValue, bool) {
		var v datapath.EnrichValue
		err := f.dp.Maps.Enrich[f.gen&1].Lookup(&f.key, &v)
		return v, err == nil
	}
	switch strings.TrimSuffix(c.feature, "-xlat") + "/" + c.name { // dns-xlat: dns's checks
	case "tls/tcp-other":
		if v, ok := enrich(on); ok && v.TlsFlags != 0 {
			return "", fmt.Errorf("a non-TLS payload set TLS flags %#x", v.TlsFlags)
		}
		return "no TLS flags on the flow", nil
	case "tls/server-hello":
		v, ok := enrich(on)
		if !ok {
			return "", fmt.Errorf("no enrichment entry for the ServerHello's flow")
		}
		if v.TlsFlags&datapath.TLSServerHello == 0 || v.TlsVersion != tlsVersion13 || v.TlsCipher != tlsAES128GCM || v.TlsGroup != tlsGroupX25519 {
			return "", fmt.Errorf("enrichment entry: flags %#x version %#04x cipher %#04x group %#04x, want server hello, 0x0304, 0x1301, 0x001d",
				v.TlsFlags, v.TlsVersion, v.TlsCipher, v.TlsGroup)
		}
		if v, ok := enrich(off); ok && v.TlsFlags != 0 {
			return "", fmt.Errorf("tls off: TLS flags %#x", v.TlsFlags)
		}
		return fmt.Sprintf("enrichment: version %#04x, cipher %#04x, group %#04x", v.TlsVersion, v.TlsCipher, v.TlsGroup), nil
	case "tls/quic":
		v, ok := enrich(on)
		if !ok || v.TlsFlags&datapath.TLSQUIC == 0 {
			return "", fmt.Errorf("the QUIC packet's flow is not marked QUIC (entry %v, flags %#x)", ok, v.TlsFlags)
		}
		return "enrichment: quic", nil
	case "xlat/steady":
		var v datapath.FlowValue
		if err := on.cur.Lookup(&on.key, &v); err != nil {
			return "", err
		}
		if v.Flags&flowXlatDone != 0 {
			return "", fmt.Errorf("conntrack found the test flow (FLOW_F_XLAT_DONE set): not the path measured")
		}
		if v.Packets <= xlatTries {
			return "", fmt.Errorf("flow at %d packets: still looking up", v.Packets)
		}
		return fmt.Sprintf("conntrack miss (FLOW_F_XLAT_DONE clear), flow past %d packets: flag and count test only", xlatTries), nil
	case "netns/exist-hot", "netns/new":
		// The shared programs record the device's namespace: under
		// BPF_PROG_TEST_RUN, the loopback of the caller's; the fallback's
		// set of Load records the cookie it was loaded with, 0.
		host, err := ifaces.NetnsCookie("")
		if err != nil {
			return "", err
		}
		for _, x := range []struct {
			f    *featDP
			want uint64
		}{{off, 0}, {on, host}} {
			var k datapath.FlowKey
			var v datapath.FlowValue
			for it := x.f.cur.Iterate(); it.Next(&k, &v); {
				if v.Ifaces[0].Netns != x.want {
					return "", fmt.Errorf("a flow recorded on netns %d, want %d", v.Ifaces[0].Netns, x.want)
				}
			}
		}
		return fmt.Sprintf("flows on netns %d (shared: this namespace's cookie), 0 (per-namespace set of cookie 0)", host), nil
	case "xlat/post-nat-first":
		var a, v datapath.FlowValue
		if err := errors.Join(on.cur.Lookup(&on.key, &a), on.cur.Lookup(&on.preKey, &v)); err != nil {
			return "", err
		}
		if a.Flags&datapath.FlowFlagXlatAlias == 0 || a.Packets == 0 || v.Packets != xlatTries+1 || v.Flags&datapath.FlowFlagXlatVia == 0 {
			return "", fmt.Errorf("the alias counted %d packets (flags %#x), the flow %d (flags %#x): want the runs in the alias, the warm-up's %d in the Via flow",
				a.Packets, a.Flags, v.Packets, v.Flags, xlatTries+1)
		}
		return fmt.Sprintf("every run counted in the alias (%d packets), for the flow before NAT (Via, its %d)", a.Packets, v.Packets), nil
	case "xlat/post-nat":
		// The first run delegated (counted in the flow), the others are
		// the alias's; the flow's note names the alias (bpf/xlat.h).
		var a, v, n datapath.FlowValue
		note := on.preKey
		note.IcmpType, note.IcmpCode = 0xff, 0xff
		if err := errors.Join(on.cur.Lookup(&on.key, &a), on.cur.Lookup(&on.preKey, &v), on.cur.Lookup(&note, &n)); err != nil {
			return "", err
		}
		if a.Flags&datapath.FlowFlagXlatAlias == 0 || a.ListedOnly&1 != 0 || a.Packets == 0 || v.Packets != xlatTries+2 || v.Flags&datapath.FlowFlagXlatVia == 0 {
			return "", fmt.Errorf("the alias counted %d packets (flags %#x, listed_only %#b), the flow %d (flags %#x): want the runs but the first in the alias, the warm-up's %d and the first in the Via flow",
				a.Packets, a.Flags, a.ListedOnly, v.Packets, v.Flags, xlatTries+1)
		}
		if to := (*datapath.XlatFlowAlias)(unsafe.Pointer(&n)).To.Key; to != on.key {
			return "", fmt.Errorf("the flow's note names %+v, not the alias", to)
		}
		return fmt.Sprintf("the first run delegated, the others counted in the alias (%d packets), for the flow before NAT (Via, its %d); its note names the alias", a.Packets, v.Packets), nil
	case "xlat/post-nat-follow", "xlat/post-nat-listed":
		var v datapath.FlowValue
		if err := on.cur.Lookup(&on.key, &v); err != nil || v.Flags&datapath.FlowFlagXlatAlias == 0 || v.Packets != 0 {
			return "", fmt.Errorf("the key after NAT is not an alias with no packets (%v, flags %#x, %d packets)", err, v.Flags, v.Packets)
		}
		if err := on.cur.Lookup(&on.preKey, &v); err != nil {
			return "", err
		}
		if c.name == "post-nat-listed" {
			if v.Packets != xlatTries+1 {
				return "", fmt.Errorf("the flow before NAT counted %d packets at a listed hook, want the warm-up's %d", v.Packets, xlatTries+1)
			}
			return fmt.Sprintf("no run counted (the flow keeps its %d packets), the key after NAT an alias with none", v.Packets), nil
		}
		if v.Packets <= xlatTries+1 {
			return "", fmt.Errorf("the flow before NAT did not count the runs (%d packets)", v.Packets)
		}
		return fmt.Sprintf("every run counted in the flow before NAT (%d packets), none under the key after NAT (an alias)", v.Packets), nil
	case "xlat/new":
		if e, ok := enrich(on); ok && e.Xlat != 0 {
			return "", fmt.Errorf("a translation recorded under BPF_PROG_TEST_RUN")
		}
		return "every run a new flow; conntrack lookup misses (no entry)", nil
	case "dns/udp-other", "dns/udp-learned":
		if v, ok := enrich(on); ok && v.DnsState != 0 {
			return "", fmt.Errorf("a UDP packet to port 8125 set DNS state %#x", v.DnsState)
		}
		var pk dnsPendingKey
		if err := on.dp.Maps.DNSPending.NextKey(nil, &pk); err == nil {
			return "", fmt.Errorf("a UDP packet to port 8125 left a pending DNS query")
		}
		return "no DNS state on the flow, dns_pending empty", nil
	case "dns/query":
		v, ok := enrich(on)
		if !ok || v.DnsState != datapath.DNSQuery || v.DnsId != dnsID || v.DnsFlags != dnsQueryRD ||
			!bytes.HasPrefix(v.DnsName[:], dnsQName) || v.DnsQueryNs == 0 {
			return "", fmt.Errorf("query's enrichment entry (found %v): state %#x id %#04x flags %#04x name %q", ok, v.DnsState, v.DnsId, v.DnsFlags, v.DnsName[:len(dnsQName)])
		}
		var ts datapath.DNSPendingValue
		if err := on.dp.Maps.DNSPending.Lookup(&dnsPendingKey{Key: on.key, ID: dnsID}, &ts); err != nil {
			return "", fmt.Errorf("the query is not pending: %w", err)
		}
		if v, ok := enrich(off); ok && v.DnsState != 0 {
			return "", fmt.Errorf("dns off: DNS state %#x", v.DnsState)
		}
		return fmt.Sprintf("enrichment: query, id %#04x, flags %#04x, name %q; pending in dns_pending", v.DnsId, v.DnsFlags, v.DnsName[:len(dnsQName)]), nil
	case "dns/answer":
		a, ok := enrich(on)
		if !ok || a.DnsState != datapath.DNSAnswer || a.DnsId != dnsID || a.DnsFlags != dnsAnswerFl || !bytes.HasPrefix(a.DnsName[:], dnsQName) {
			return "", fmt.Errorf("answer's enrichment entry (found %v): state %#x id %#04x flags %#04x name %q", ok, a.DnsState, a.DnsId, a.DnsFlags, a.DnsName[:len(dnsQName)])
		}
		var q datapath.EnrichValue
		if err := on.dp.Maps.Enrich[on.gen&1].Lookup(&on.preKey, &q); err != nil {
			return "", fmt.Errorf("no enrichment entry for the query's flow: %w", err)
		}
		if q.DnsState != datapath.DNSQuery|datapath.DNSAnswered || q.DnsLatencyNs == 0 || q.DnsFlags != dnsAnswerFl || q.DnsId != dnsID {
			return "", fmt.Errorf("query's flow: state %#x latency %d flags %#04x id %#04x, want answered", q.DnsState, q.DnsLatencyNs, q.DnsFlags, q.DnsId)
		}
		var pk dnsPendingKey
		if err := on.dp.Maps.DNSPending.NextKey(nil, &pk); err == nil {
			return "", fmt.Errorf("a pending query is left: the runs did not measure the unmatched path")
		}
		if v, ok := enrich(off); ok && v.DnsState != 0 {
			return "", fmt.Errorf("dns off: DNS state %#x", v.DnsState)
		}
		return fmt.Sprintf("answer flow: id %#04x flags %#04x name %q; query flow answered once (warm-up, latency %d ns), dns_pending empty: the runs are unmatched answers",
			a.DnsId, a.DnsFlags, a.DnsName[:len(dnsQName)], q.DnsLatencyNs), nil
	}
	return "", nil
}

func parseFeatures(s string) ([]string, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f != "tls" && f != "xlat" && f != "dns" && f != "dns-xlat" && f != "tcp" && f != "netns" && f != "overlay" && f != "overlay-outer" {
			return nil, fmt.Errorf("bad -tc-features entry %q: tls, xlat, dns, dns-xlat, tcp, netns, overlay, overlay-outer", f)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

func printFeatures(rows []featRow) {
	fmt.Println("Features inside the TC programs (issue #15): IPv4, one flow, the feature on vs off (load-time")
	fmt.Println("constant), floor, off and on programs in the same repetitions. median over repetitions [min..max];")
	fmt.Println("×floor, ×off = medians of per-repetition ratios. own: a packet of the feature's kind; other: any other.")
	fmt.Println()
	fmt.Printf("%-4s %-12s %-5s %-9s | %8s %17s | %8s %6s | %8s | %6s | %6s %13s\n",
		"feat", "case", "kind", "path", "on ns", "min..max", "off ns", "×floor", "floor ns", "×floor", "×off", "min..max")
	fmt.Println(strings.Repeat("-", 124))
	for _, r := range rows {
		mark := ""
		if r.StatsOn {
			mark = " *"
		}
		fmt.Printf("%-4s %-12s %-5s %-9s | %8.2f %17s | %8.2f %6.2f | %8.2f | %6.2f | %6.3f %13s%s\n",
			r.Feature, r.Case, r.Kind, r.Path, r.Prog.Median, fmt.Sprintf("%.2f..%.2f", r.Prog.Min, r.Prog.Max),
			r.Off.Median, r.OffRatio, r.Floor.Median, r.Ratio, r.VsOff, fmt.Sprintf("%.3f..%.3f", r.VsOffMin, r.VsOffMax), mark)
	}
	fmt.Println()
	for _, r := range rows {
		if r.Check != "" {
			fmt.Printf("checked, %s %s: %s\n", r.Feature, r.Case, r.Check)
		}
	}
	fmt.Println()
}

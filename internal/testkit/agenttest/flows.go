package agenttest

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// JSONFlow is one line of the agent's JSON output, decoded with the public
// field names (so the test also checks the output contract).
type JSONFlow struct {
	SrcAddr    string `json:"src_addr"`
	DstAddr    string `json:"dst_addr"`
	SrcPort    uint16 `json:"src_port"`
	DstPort    uint16 `json:"dst_port"`
	Proto      uint8  `json:"proto"`
	IcmpType   uint8  `json:"icmp_type"`
	IcmpCode   uint8  `json:"icmp_code"`
	Bytes      uint64 `json:"bytes"`
	Packets    uint64 `json:"packets"`
	TCPFlags   uint16 `json:"tcp_flags"`
	EthType    uint16 `json:"eth_type"`
	DSCP       uint8  `json:"dscp"`
	SrcMAC     string `json:"src_mac"`
	DstMAC     string `json:"dst_mac"`
	StartTime  string `json:"start_time"`
	EndTime    string `json:"end_time"`
	Interfaces []struct {
		Name      string `json:"name"`
		Ifindex   uint32 `json:"ifindex"`
		Netns     string `json:"netns"`
		Direction string `json:"direction"`
	} `json:"interfaces"`
	TunnelType    string `json:"tunnel_type"`
	TunnelSrcAddr string `json:"tunnel_src_addr"`
	TunnelDstAddr string `json:"tunnel_dst_addr"`
	TunnelVNI     uint32 `json:"tunnel_vni"`
	OverlayOuter  bool   `json:"overlay_outer"` // a tunnel flow's own record (--overlay-outer-flows): sums skip it
	Sampling      uint32 `json:"sampling"`
	Partial       *bool  `json:"partial"`
	FragUnmatched *bool  `json:"frag_unmatched"`
	L4Unread      bool   `json:"l4_unread"`
	ExtUnread     bool   `json:"ext_unread"`

	DropPackets  uint64 `json:"drop_packets"`
	DropBytes    uint64 `json:"drop_bytes"`
	DropCause    string `json:"drop_cause"`
	DropTCPState string `json:"drop_tcp_state"`
	DropTCPFlags uint16 `json:"drop_tcp_flags"`
	RTTNs        uint64 `json:"rtt_ns"`
	RTTMaxNs     uint64 `json:"rtt_max_ns"`
	Retransmits  uint64 `json:"retransmits"`

	XlatSrcAddr string `json:"xlat_src_addr"`
	XlatSrcPort uint16 `json:"xlat_src_port"`
	XlatDstAddr string `json:"xlat_dst_addr"`
	XlatDstPort uint16 `json:"xlat_dst_port"`
	XlatZoneID  uint16 `json:"xlat_zone_id"`

	TLSVersion     string `json:"tls_version"`
	TLSCipherSuite string `json:"tls_cipher_suite"`
	TLSGroup       string `json:"tls_group"`
	TLSClientHello bool   `json:"tls_client_hello"`
	QUIC           bool   `json:"quic"`

	DNSID        uint16 `json:"dns_id"`
	DNSFlags     uint16 `json:"dns_flags"`
	DNSRcode     string `json:"dns_rcode"`
	DNSName      string `json:"dns_name"`
	DNSLatencyNs uint64 `json:"dns_latency_ns"`
	DNSTimeout   bool   `json:"dns_timeout"`

	SrcDNSName string `json:"src_dns_name"`
	DstDNSName string `json:"dst_dns_name"`
}

// Ifaces lists the flow's interfaces as netns/name:direction.
func (f JSONFlow) Ifaces() string {
	var s []string
	for _, i := range f.Interfaces {
		s = append(s, i.Netns+"/"+i.Name+":"+i.Direction)
	}
	return strings.Join(s, " ")
}

// ParseFlows decodes the agent's JSON lines, failing t on a line that lacks
// the contract fields.
func ParseFlows(t *testing.T, out string) []JSONFlow {
	t.Helper()
	var flows []JSONFlow
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var f JSONFlow
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		if err := dec.Decode(&f); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		if f.Partial == nil || f.StartTime == "" || f.EndTime == "" {
			t.Fatalf("line lacks contract fields: %q", sc.Text())
		}
		if _, err := time.Parse(time.RFC3339Nano, f.StartTime); err != nil {
			t.Fatalf("start_time %q: %v", f.StartTime, err)
		}
		flows = append(flows, f)
	}
	return flows
}

// Match selects flows by 5-tuple (zero fields match anything).
type Match struct {
	Src, Dst     string
	Sport, Dport uint16
	Proto        uint8
}

// OK says whether f matches.
func (m Match) OK(f JSONFlow) bool {
	return (m.Src == "" || f.SrcAddr == m.Src) && (m.Dst == "" || f.DstAddr == m.Dst) &&
		(m.Sport == 0 || f.SrcPort == m.Sport) && (m.Dport == 0 || f.DstPort == m.Dport) &&
		(m.Proto == 0 || f.Proto == m.Proto)
}

// Sum adds up the packets and bytes of the flows m selects, and returns them.
func Sum(flows []JSONFlow, m Match) (packets, bytes uint64, recs []JSONFlow) {
	for _, f := range flows {
		if m.OK(f) {
			packets += f.Packets
			bytes += f.Bytes
			recs = append(recs, f)
		}
	}
	return
}

// EnrichSum adds up the enrichment fields of the matching records.
func EnrichSum(flows []JSONFlow, m Match) (drops, dropBytes, retrans, rttMax uint64, causes map[string]bool, partial int) {
	causes = map[string]bool{}
	for _, f := range flows {
		if !m.OK(f) {
			continue
		}
		drops += f.DropPackets
		dropBytes += f.DropBytes
		retrans += f.Retransmits
		rttMax = max(rttMax, f.RTTMaxNs)
		if f.DropCause != "" {
			causes[f.DropCause] = true
		}
		if *f.Partial {
			partial++
		}
	}
	return
}

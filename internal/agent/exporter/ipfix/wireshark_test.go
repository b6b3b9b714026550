package ipfix

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/netsampler/goflow2/v2/decoders/netflow"

	"github.com/flowlens/flowlens/pkg/flow"
)

// pcapPort is the UDP destination port of the packets written to the pcap,
// the one tshark is told to decode as IPFIX (cflow).
const pcapPort = 4739

// writePcap writes msgs as a pcap file (Ethernet link type), each as the
// payload of one UDP/IPv4 packet from 192.0.2.1:40000 to 192.0.2.2:pcapPort.
func writePcap(path string, msgs [][]byte, at time.Time) error {
	le := binary.LittleEndian
	be := binary.BigEndian
	var b []byte
	b = le.AppendUint32(b, 0xa1b2c3d4) // magic, microsecond timestamps
	b = le.AppendUint16(b, 2)          // version 2.4
	b = le.AppendUint16(b, 4)
	b = le.AppendUint32(b, 0)     // thiszone
	b = le.AppendUint32(b, 0)     // sigfigs
	b = le.AppendUint32(b, 65535) // snaplen
	b = le.AppendUint32(b, 1)     // LINKTYPE_ETHERNET
	for i, m := range msgs {
		frameLen := 14 + 20 + 8 + len(m)
		b = le.AppendUint32(b, uint32(at.Unix()))
		b = le.AppendUint32(b, uint32(i)) // microseconds: the packets' order
		b = le.AppendUint32(b, uint32(frameLen))
		b = le.AppendUint32(b, uint32(frameLen))
		// Ethernet
		b = append(b, 0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1)
		b = be.AppendUint16(b, 0x0800)
		// IPv4, no options
		ip := len(b)
		b = append(b, 0x45, 0)
		b = be.AppendUint16(b, uint16(20+8+len(m)))
		b = be.AppendUint16(b, uint16(i)) // id
		b = be.AppendUint16(b, 0x4000)    // DF
		b = append(b, 64, 17, 0, 0)       // TTL, UDP, checksum below
		b = append(b, 192, 0, 2, 1, 192, 0, 2, 2)
		var sum uint32
		for j := ip; j < ip+20; j += 2 {
			sum += uint32(be.Uint16(b[j:]))
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		be.PutUint16(b[ip+10:], ^uint16(sum))
		// UDP, no checksum (allowed over IPv4)
		b = be.AppendUint16(b, 40000)
		b = be.AppendUint16(b, pcapPort)
		b = be.AppendUint16(b, uint16(8+len(m)))
		b = be.AppendUint16(b, 0)
		b = append(b, m...)
	}
	return os.WriteFile(path, b, 0o644)
}

// tsharkFlows runs tshark on the pcap at path, decoding pcapPort as IPFIX
// (cflow), and returns every decoded data record (its cflow.* fields) and
// the number of packets tshark read.
func tsharkFlows(t *testing.T, tshark, path string) (flows []map[string]any, packets int) {
	t.Helper()
	// --no-duplicate-keys: the enterprise-specific elements, which tshark
	// shows under one name, come as a list in record order.
	cmd := exec.Command(tshark, "-r", path, "-d", "udp.port=="+strconv.Itoa(pcapPort)+",cflow", "-T", "json", "--no-duplicate-keys")
	cmd.Env = append(os.Environ(), "TZ=UTC")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v: %s", err, stderr.String())
	}
	var pkts []struct {
		Source struct {
			Layers map[string]any `json:"layers"`
		} `json:"_source"`
	}
	if err := json.Unmarshal(out, &pkts); err != nil {
		t.Fatalf("tshark JSON: %v", err)
	}
	for i, p := range pkts {
		if _, bad := p.Source.Layers["_ws.malformed"]; bad {
			t.Errorf("packet %d: tshark says malformed", i+1)
		}
		cf, ok := p.Source.Layers["cflow"].(map[string]any)
		if !ok {
			t.Fatalf("packet %d: no cflow layer (layers %v)", i+1, keys(p.Source.Layers))
		}
		for k, v := range cf {
			set, ok := v.(map[string]any)
			if !strings.HasPrefix(k, "Set ") || !ok || set["cflow.flowset_id"] == "2" {
				continue
			}
			for fk, fv := range set {
				if !strings.HasPrefix(fk, "Flow ") {
					continue
				}
				for _, x := range asList(fv) {
					if f, ok := x.(map[string]any); ok {
						f["template"] = set["cflow.flowset_id"]
						flows = append(flows, f)
					}
				}
			}
		}
	}
	return flows, len(pkts)
}

// asList is v, a list or one value (tshark's JSON gives a key seen once its
// value, a key seen several times a list).
func asList(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	if v == nil {
		return nil
	}
	return []any{v}
}

// tsharkInterfaces is the interfaces list tshark decoded in flow f (its
// subTemplateList of TemplateInterface entries), as "semantic template
// [name in out ...]".
func tsharkInterfaces(f map[string]any) string {
	l, _ := f["cflow.subtemplate_list"].(map[string]any)
	var entries []listEntry
	for i := 1; ; i++ {
		it, ok := l["List Item "+strconv.Itoa(i)].(map[string]any)
		if !ok {
			break
		}
		in, _ := strconv.ParseUint(fmt.Sprint(it["cflow.inputint"]), 10, 32)
		out, _ := strconv.ParseUint(fmt.Sprint(it["cflow.outputint"]), 10, 32)
		entries = append(entries, listEntry{fmt.Sprint(it["cflow.if_name"]), uint32(in), uint32(out)})
	}
	return fmt.Sprint(l["cflow.subtemplate_semantic"], " ", l["cflow.subtemplate_id"], " ", entries)
}

// tsharkEnterprise is what tshark shows of r's enterprise-specific
// elements (it knows no name for them under our PEN): their values in
// template order, as colon-separated hex, an empty string left out.
func tsharkEnterprise(r *flow.Record) (out []string) {
	want := wantEnterprise(r)
	for _, fl := range templateFields(recordVariant(r)) {
		if !fl.pen || len(want[fl.id]) == 0 {
			continue
		}
		var hex []string
		for _, c := range want[fl.id] {
			hex = append(hex, fmt.Sprintf("%02x", c))
		}
		out = append(out, strings.Join(hex, ":"))
	}
	return out
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// tsharkWant is what Wireshark's dissector must show for r: its cflow.*
// field names and values as tshark prints them.
func tsharkWant(r *flow.Record) map[string]string {
	dir := "0"
	if r.Interfaces[0].Direction == flow.DirEgress {
		dir = "1"
	}
	m := map[string]string{
		"cflow.srcport":                  strconv.Itoa(int(r.SrcPort)),
		"cflow.dstport":                  strconv.Itoa(int(r.DstPort)),
		"cflow.protocol":                 strconv.Itoa(int(r.Proto)),
		"cflow.octets":                   strconv.FormatUint(r.Bytes-14*r.Packets, 10),
		"cflow.packets":                  strconv.FormatUint(r.Packets, 10),
		"cflow.layer2_octet_delta_count": strconv.FormatUint(r.Bytes, 10),
		"cflow.tcpflags":                 fmt.Sprintf("0x%04x", r.TCPFlags&0xff),
		"cflow.tos":                      fmt.Sprintf("0x%02x", r.DSCP<<2),
		"cflow.srcmac":                   macString(r.SrcMAC),
		"cflow.dstmac":                   macString(r.DstMAC),
		"cflow.ethernet_type":            strconv.Itoa(int(r.EthType)),
		"cflow.direction":                dir,
		"abstimestart":                   r.StartTime.UTC().Format(tsharkTime),
		"abstimeend":                     r.EndTime.UTC().Format(tsharkTime),
	}
	icmpType, icmpCode := 0, 0
	if r.Proto == 1 || r.Proto == 58 {
		icmpType, icmpCode = int(r.IcmpType), int(r.IcmpCode)
	}
	if r.SrcAddr.Is4() {
		m["cflow.srcaddr"], m["cflow.dstaddr"] = r.SrcAddr.String(), r.DstAddr.String()
		m["cflow.icmp_type_code_ipv4"] = fmt.Sprintf("0x%04x", icmpType<<8|icmpCode)
	} else {
		m["cflow.srcaddrv6"], m["cflow.dstaddrv6"] = r.SrcAddr.String(), r.DstAddr.String()
		m["cflow.icmp_ipv6_type"], m["cflow.icmp_ipv6_code"] = strconv.Itoa(icmpType), strconv.Itoa(icmpCode)
	}
	if r.Translated() {
		src, sp, dst, dp := PostNAT(r)
		if r.SrcAddr.Is4() {
			m["cflow.post_natsource_ipv4_address"] = src.String()
			m["cflow.post_natdestination_ipv4_address"] = dst.String()
		} else {
			m["cflow.post_nat_source_ipv6_address"] = src.String()
			m["cflow.post_nat_destination_ipv6_address"] = dst.String()
		}
		m["cflow.post_naptsource_transport_port"] = strconv.Itoa(int(sp))
		m["cflow.post_naptdestination_transport_port"] = strconv.Itoa(int(dp))
	}
	return m
}

// tsharkTime is how tshark prints an absolute time (TZ=UTC).
const tsharkTime = "Jan _2, 2006 15:04:05.000000000 MST"

func macString(m [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// Wireshark's IPFIX dissector, a decoder independent of goflow2 and of us,
// decodes the exporter's UDP messages (written to a pcap) to every standard
// field of IPv4 TCP, IPv6 UDP, ICMP and ICMPv6 flows, translated or not,
// enriched (enterprise-specific elements after the standard ones) or not.
func TestDecodedByWireshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("SKIPPED: tshark is not installed, so Wireshark's IPFIX dissector was NOT checked; " +
			"install it with `sudo hack/install-deps.sh test` (Debian's tshark)")
	}
	col, e := udpExporter(t, Config{DomainID: 42, MaxMessageBytes: DefaultMaxMessageBytes})
	batch := records(200)
	translate(batch)
	enrich(batch)
	dnsTLS(batch)
	tunnels(batch)
	if err := e.Export(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	msgs, _ := receive(t, col, netflow.CreateTemplateSystem(), len(batch))
	path := filepath.Join(t.TempDir(), "ipfix.pcap")
	if err := writePcap(path, msgs, time.Unix(1_700_000_100, 0)); err != nil {
		t.Fatal(err)
	}
	flows, packets := tsharkFlows(t, tshark, path)
	if packets != len(msgs) {
		t.Fatalf("tshark read %d packets, want %d", packets, len(msgs))
	}
	if len(flows) != len(batch) {
		t.Fatalf("tshark decoded %d flows, want %d", len(flows), len(batch))
	}
	// Flows come out of a JSON object (unordered): match them by address pair.
	byAddrs := map[string]map[string]any{}
	for _, f := range flows {
		src, dst := f["cflow.srcaddr"], f["cflow.dstaddr"]
		if src == nil {
			src, dst = f["cflow.srcaddrv6"], f["cflow.dstaddrv6"]
		}
		byAddrs[fmt.Sprint(src, " ", dst)] = f
	}
	nat, dns, tls, tun := 0, 0, 0, 0
	for i := range batch {
		r := &batch[i]
		f := byAddrs[r.SrcAddr.String()+" "+r.DstAddr.String()]
		if f == nil {
			t.Errorf("flow %v -> %v not decoded by tshark", r.SrcAddr, r.DstAddr)
			continue
		}
		tmpl := templateID(recordVariant(r))
		if f["template"] != strconv.Itoa(int(tmpl)) {
			t.Errorf("%v: template %v, want %d", r.SrcAddr, f["template"], tmpl)
		}
		if r.Translated() {
			nat++
		}
		if td, ok := f["cflow.timedelta_tree"].(map[string]any); ok {
			f["abstimestart"], f["abstimeend"] = td["cflow.abstimestart"], td["cflow.abstimeend"]
		}
		for k, w := range tsharkWant(r) {
			if got, _ := f[k].(string); got != w {
				t.Errorf("%v -> %v proto %d: %s = %q, want %q", r.SrcAddr, r.DstAddr, r.Proto, k, got, w)
			}
		}
		if got, w := tsharkInterfaces(f), fmt.Sprint("4 ", TemplateInterface, " ", wantInterfaces(r)); got != w {
			t.Errorf("%v: interfaces list %s, want %s", r.SrcAddr, got, w)
		}
		if got, w := fmt.Sprint(asList(f["cflow.enterprise_private_entry"])), fmt.Sprint(tsharkEnterprise(r)); got != w {
			t.Errorf("%v: enterprise elements %s, want %s", r.SrcAddr, got, w)
		}
		if r.HasDNS() {
			dns++
		}
		if r.HasTLS() {
			tls++
		}
		if Tunneled(r) {
			tun++
		}
	}
	if nat == 0 || nat == len(batch) {
		t.Errorf("%d translated flows of %d: both kinds must be checked", nat, len(batch))
	}
	if dns == 0 || tls == 0 || tun == 0 {
		t.Errorf("%d flows with DNS, %d with TLS, %d in a tunnel: all must be checked", dns, tls, tun)
	}
	t.Logf("tshark decoded %d flows (%d translated, %d DNS, %d TLS, %d tunnel) from %d messages", len(flows), nat, dns, tls, tun, len(msgs))
}

package flow_test

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/pkg/flow"
)

func sampleRecord() flow.Record {
	return flow.Record{
		SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("fd00::2"),
		SrcPort: 1234, DstPort: 80, Proto: 6, IcmpType: 0, IcmpCode: 0,
		Bytes: 1500, Packets: 3, TCPFlags: 0x12 | flow.TCPFlagSynAck, EthType: 0x86dd, DSCP: 46,
		SrcMAC: [6]byte{0x02, 0, 0, 0, 0, 0x0a}, DstMAC: [6]byte{0xde, 0xad, 0xbe, 0xef, 0, 1},
		StartTime: time.Date(2026, 11, 22, 4, 0, 0, 123456789, time.UTC),
		EndTime:   time.Date(2026, 11, 22, 4, 0, 1, 5, time.UTC),
		Interfaces: []flow.Interface{
			{Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirIngress},
			{Name: `we"ird`, Ifindex: 7, Netns: "pod-a", Direction: flow.DirBoth},
		},
		Sampling:          1,
		DropsFields:       flow.DropsFields{DropPackets: 2, DropBytes: 100, DropCause: "NO_SOCKET", DropTCPState: "ESTABLISHED", DropTCPFlags: 0x10},
		RTTFields:         flow.RTTFields{RTT: 150 * time.Microsecond, RTTMax: time.Millisecond},
		RetransmitsFields: flow.RetransmitsFields{Retransmits: 4},
	}
}

// The JSON field names and value formats are a public contract.
func TestAppendJSONContract(t *testing.T) {
	r := sampleRecord()
	var got map[string]any
	if err := json.Unmarshal(r.AppendJSON(nil), &got); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, r.AppendJSON(nil))
	}
	want := map[string]any{
		"src_addr": "10.0.0.1", "dst_addr": "fd00::2", "src_port": 1234.0, "dst_port": 80.0, "proto": 6.0,
		"icmp_type": 0.0, "icmp_code": 0.0, "bytes": 1500.0, "packets": 3.0, "tcp_flags": float64(0x112),
		"eth_type": float64(0x86dd), "dscp": 46.0, "src_mac": "02:00:00:00:00:0a", "dst_mac": "de:ad:be:ef:00:01",
		"start_time": "2026-11-22T04:00:00.123456789Z", "end_time": "2026-11-22T04:00:01.000000005Z",
		"interfaces": []any{
			map[string]any{"name": "eth0", "ifindex": 2.0, "netns": "host", "direction": "ingress"},
			map[string]any{"name": `we"ird`, "ifindex": 7.0, "netns": "pod-a", "direction": "both"},
		},
		"sampling": 1.0, "partial": false,
		"drop_packets": 2.0, "drop_bytes": 100.0, "drop_cause": "NO_SOCKET", "drop_tcp_state": "ESTABLISHED",
		"drop_tcp_flags": 16.0, "rtt_ns": 150000.0, "rtt_max_ns": 1e6, "retransmits": 4.0,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
}

func TestAppendJSONNoAllocs(t *testing.T) {
	r := sampleRecord()
	buf := make([]byte, 0, 2048)
	if n := testing.AllocsPerRun(100, func() { buf = r.AppendJSON(buf[:0]) }); n != 0 {
		t.Fatalf("%v allocations per record", n)
	}
}

func TestInterfacesOverflowField(t *testing.T) {
	r := sampleRecord()
	r.IfacesOverflow = true
	var got struct {
		Overflow bool `json:"interfaces_overflow"`
	}
	if err := json.Unmarshal(r.AppendJSON(nil), &got); err != nil || !got.Overflow {
		t.Fatalf("interfaces_overflow not set: %v", err)
	}
}

// The unreadable-header flags (issue #29) are written only when set.
func TestUnreadFields(t *testing.T) {
	r := sampleRecord()
	for _, tc := range []struct{ l4, ext bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		r.L4Unread, r.ExtUnread = tc.l4, tc.ext
		var got map[string]any
		if err := json.Unmarshal(r.AppendJSON(nil), &got); err != nil {
			t.Fatal(err)
		}
		l4, hasL4 := got["l4_unread"]
		ext, hasExt := got["ext_unread"]
		if hasL4 != tc.l4 || hasExt != tc.ext || (hasL4 && l4 != true) || (hasExt && ext != true) {
			t.Errorf("l4 %v ext %v: got l4_unread %v (%v), ext_unread %v (%v)", tc.l4, tc.ext, l4, hasL4, ext, hasExt)
		}
	}
}

// Translation fields (feature "xlat") are written only for translated flows,
// addresses as text, IPv4 (even IPv4-mapped) as plain IPv4 like src_addr.
func TestAppendJSONXlat(t *testing.T) {
	keys := []string{"xlat_src_addr", "xlat_src_port", "xlat_dst_addr", "xlat_dst_port", "xlat_zone_id"}
	decode := func(r flow.Record) map[string]any {
		t.Helper()
		var got map[string]any
		if err := json.Unmarshal(r.AppendJSON(nil), &got); err != nil {
			t.Fatalf("invalid JSON: %v\n%s", err, r.AppendJSON(nil))
		}
		return got
	}

	r := sampleRecord()
	r.XlatSrcPort, r.XlatDstPort, r.XlatZoneID = 1, 2, 3 // no address: not translated
	if r.Translated() {
		t.Fatal("Translated without an address")
	}
	got := decode(r)
	for _, k := range keys {
		if _, ok := got[k]; ok {
			t.Errorf("untranslated flow has %s", k)
		}
	}

	for _, c := range []struct {
		name     string
		src, dst netip.Addr
		want     map[string]any
	}{
		{"DNAT to a backend", netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.244.1.7"),
			map[string]any{"xlat_src_addr": "10.0.0.1", "xlat_src_port": 40000.0, "xlat_dst_addr": "10.244.1.7", "xlat_dst_port": 8080.0, "xlat_zone_id": 7.0}},
		{"IPv4-mapped as plain IPv4", netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("::ffff:10.244.1.7"),
			map[string]any{"xlat_src_addr": "192.0.2.1", "xlat_src_port": 40000.0, "xlat_dst_addr": "10.244.1.7", "xlat_dst_port": 8080.0, "xlat_zone_id": 7.0}},
		{"IPv6", netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00:10::7"),
			map[string]any{"xlat_src_addr": "fd00::1", "xlat_src_port": 40000.0, "xlat_dst_addr": "fd00:10::7", "xlat_dst_port": 8080.0, "xlat_zone_id": 7.0}},
		{"only the destination", netip.Addr{}, netip.MustParseAddr("10.244.1.7"),
			map[string]any{"xlat_src_addr": "", "xlat_src_port": 40000.0, "xlat_dst_addr": "10.244.1.7", "xlat_dst_port": 8080.0, "xlat_zone_id": 7.0}},
	} {
		r := sampleRecord()
		r.XlatSrcAddr, r.XlatSrcPort, r.XlatDstAddr, r.XlatDstPort, r.XlatZoneID = c.src, 40000, c.dst, 8080, 7
		got := decode(r)
		for _, k := range keys {
			if got[k] != c.want[k] {
				t.Errorf("%s: %s = %#v, want %#v", c.name, k, got[k], c.want[k])
			}
		}
		// Everything else is as for an untranslated flow.
		for _, k := range keys {
			delete(got, k)
		}
		if base := decode(sampleRecord()); !reflect.DeepEqual(got, base) {
			t.Errorf("%s: other fields changed:\n got %v\nwant %v", c.name, got, base)
		}
	}
}

func TestAppendJSONXlatNoAllocs(t *testing.T) {
	r := sampleRecord()
	r.XlatSrcAddr, r.XlatSrcPort = netip.MustParseAddr("::ffff:10.0.0.1"), 40000
	r.XlatDstAddr, r.XlatDstPort, r.XlatZoneID = netip.MustParseAddr("fd00:10::7"), 8080, 7
	buf := make([]byte, 0, 2048)
	if n := testing.AllocsPerRun(100, func() { buf = r.AppendJSON(buf[:0]) }); n != 0 {
		t.Fatalf("%v allocations per translated record", n)
	}
}

// TLS fields (feature "tls") are written only for flows that carry one,
// values by name ("names in JSON, numbers in protobuf"), "" for a value not
// seen, "0x%04x" for one the tables do not name.
func TestAppendJSONTLS(t *testing.T) {
	keys := []string{"tls_version", "tls_cipher_suite", "tls_group", "tls_client_hello", "quic"}
	decode := func(r flow.Record) map[string]any {
		t.Helper()
		var got map[string]any
		if err := json.Unmarshal(r.AppendJSON(nil), &got); err != nil {
			t.Fatalf("invalid JSON: %v\n%s", err, r.AppendJSON(nil))
		}
		return got
	}

	r := sampleRecord()
	if r.HasTLS() {
		t.Fatal("HasTLS on a record without TLS fields")
	}
	got := decode(r)
	for _, k := range keys {
		if _, ok := got[k]; ok {
			t.Errorf("flow without TLS has %s", k)
		}
	}

	type tlsRec struct {
		version, suite, group uint16
		client, quic          bool
	}
	for _, c := range []struct {
		name string
		in   tlsRec
		want map[string]any
	}{
		{"TLS 1.3 ServerHello", tlsRec{0x0304, 0x1301, 0x001d, false, false},
			map[string]any{"tls_version": "TLS 1.3", "tls_cipher_suite": "TLS_AES_128_GCM_SHA256", "tls_group": "x25519", "tls_client_hello": false, "quic": false}},
		{"TLS 1.3 hybrid post-quantum", tlsRec{0x0304, 0x1302, 0x11ec, false, false},
			map[string]any{"tls_version": "TLS 1.3", "tls_cipher_suite": "TLS_AES_256_GCM_SHA384", "tls_group": "X25519MLKEM768", "tls_client_hello": false, "quic": false}},
		{"TLS 1.2 without key_share", tlsRec{0x0303, 0xc02f, 0, false, false},
			map[string]any{"tls_version": "TLS 1.2", "tls_cipher_suite": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "tls_group": "", "tls_client_hello": false, "quic": false}},
		{"TLS 1.0, CBC, secp384r1", tlsRec{0x0301, 0xc014, 0x0018, false, false},
			map[string]any{"tls_version": "TLS 1.0", "tls_cipher_suite": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "tls_group": "secp384r1", "tls_client_hello": false, "quic": false}},
		{"SSL 3.0, RC4", tlsRec{0x0300, 0x0005, 0, false, false},
			map[string]any{"tls_version": "SSL 3.0", "tls_cipher_suite": "TLS_RSA_WITH_RC4_128_SHA", "tls_group": "", "tls_client_hello": false, "quic": false}},
		{"ClientHello only", tlsRec{0, 0, 0, true, false},
			map[string]any{"tls_version": "", "tls_cipher_suite": "", "tls_group": "", "tls_client_hello": true, "quic": false}},
		{"QUIC only", tlsRec{0, 0, 0, false, true},
			map[string]any{"tls_version": "", "tls_cipher_suite": "", "tls_group": "", "tls_client_hello": false, "quic": true}},
		{"unknown values in hex", tlsRec{0x7f1c, 0xabcd, 0x0a0b, true, true},
			map[string]any{"tls_version": "0x7f1c", "tls_cipher_suite": "0xabcd", "tls_group": "0x0a0b", "tls_client_hello": true, "quic": true}},
		{"group alone", tlsRec{0, 0, 0x0100, false, false},
			map[string]any{"tls_version": "", "tls_cipher_suite": "", "tls_group": "ffdhe2048", "tls_client_hello": false, "quic": false}},
	} {
		r := sampleRecord()
		r.TLSVersion, r.TLSCipherSuite, r.TLSGroup, r.TLSClientHello, r.QUIC = c.in.version, c.in.suite, c.in.group, c.in.client, c.in.quic
		if !r.HasTLS() {
			t.Errorf("%s: HasTLS false", c.name)
		}
		got := decode(r)
		for _, k := range keys {
			if got[k] != c.want[k] {
				t.Errorf("%s: %s = %#v, want %#v", c.name, k, got[k], c.want[k])
			}
		}
		for _, k := range keys {
			delete(got, k)
		}
		if base := decode(sampleRecord()); !reflect.DeepEqual(got, base) {
			t.Errorf("%s: other fields changed:\n got %v\nwant %v", c.name, got, base)
		}
	}

	// After the xlat keys, in the contract's order.
	r = sampleRecord()
	r.XlatDstAddr, r.TLSVersion, r.QUIC = netip.MustParseAddr("10.0.0.9"), 0x0304, true
	js := string(r.AppendJSON(nil))
	if !strings.HasSuffix(js, `"xlat_zone_id":0,"tls_version":"TLS 1.3","tls_cipher_suite":"","tls_group":"","tls_client_hello":false,"quic":true}`) {
		t.Errorf("TLS keys not last, in order:\n%s", js)
	}
}

func TestAppendJSONTLSNoAllocs(t *testing.T) {
	for _, r := range []flow.Record{sampleRecord(), sampleRecord()} {
		r.TLSVersion, r.TLSCipherSuite, r.TLSGroup, r.TLSClientHello = 0x0303, 0xcca8, 0x11ec, true
		buf := make([]byte, 0, 2048)
		if n := testing.AllocsPerRun(100, func() { buf = r.AppendJSON(buf[:0]) }); n != 0 {
			t.Fatalf("%v allocations per TLS record", n)
		}
		// Unknown values (hex) allocate nothing either.
		r.TLSVersion, r.TLSCipherSuite, r.TLSGroup, r.QUIC = 0xfefd, 0xeeee, 0x9999, true
		if n := testing.AllocsPerRun(100, func() { buf = r.AppendJSON(buf[:0]) }); n != 0 {
			t.Fatalf("%v allocations per TLS record with unknown values", n)
		}
	}
}

package flow_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/flowlens/flowlens/pkg/flow"
)

// pad zero-pads a wire name to the 64 bytes the kernel copies.
func pad(s string) []byte {
	b := make([]byte, flow.DNSMaxWireName)
	copy(b, s)
	return b
}

// wire builds a wire-format name from labels, with its terminating zero.
func wire(labels ...string) string {
	var b strings.Builder
	for _, l := range labels {
		b.WriteByte(byte(len(l)))
		b.WriteString(l)
	}
	b.WriteByte(0)
	return b.String()
}

func TestDNSNameFromWire(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	for _, c := range []struct {
		name      string
		in        []byte
		want      string
		truncated bool
	}{
		{"empty: nothing copied", nil, "", false},
		{"root", []byte{0}, ".", false},
		{"root, padded", pad("\x00"), ".", false},
		{"one label", pad(wire("localhost")), "localhost", false},
		{"two labels", pad(wire("example", "com")), "example.com", false},
		{"unpadded, exact", []byte(wire("example", "com")), "example.com", false},
		{"kubernetes service", pad(wire("kubernetes", "default", "svc", "cluster", "local")),
			"kubernetes.default.svc.cluster.local", false},
		{"case kept", pad(wire("WwW", "Example", "COM")), "WwW.Example.COM", false},
		{"digits, hyphen, underscore", pad(wire("_sip", "_udp", "a-1", "x9")), "_sip._udp.a-1.x9", false},
		{"qtype after the name ignored", []byte(wire("a", "b") + "\x00\x01\x00\x01"), "a.b", false},
		{"garbage after the name ignored", []byte(wire("a") + "\x05zzzzz\x00"), "a", false},
		{"63-byte label fits", []byte(wire(label63)), label63, false},
		// 64 bytes exactly: 1+62 + terminating zero.
		{"name filling 64 bytes", []byte(wire(strings.Repeat("b", 62))), strings.Repeat("b", 62), false},

		// Truncation.
		{"label runs past the end", []byte("\x07exam"), "exam", true},
		{"second label runs past the end", []byte("\x03www\x07exam"), "www.exam", true},
		{"label of 63 cut at 64 bytes", append([]byte{63}, []byte(strings.Repeat("c", 63))...), strings.Repeat("c", 63), true},
		{"long name cut by the kernel", []byte(wire("a-very-long-label-for-a-test", "another-quite-long-label", "example", "com")[:64]),
			"a-very-long-label-for-a-test.another-quite-long-label.example.c", true},
		{"no terminating zero", []byte("\x03www\x07example"), "www.example", true},
		{"length byte alone", []byte{5}, "", true},
		{"compression pointer first", []byte{0xc0, 0x0c, 0, 0}, "", true},
		{"compression pointer after a label", pad("\x03www\xc0\x0c"), "www", true},
		{"extended label type 0x40", pad("\x03www\x41x"), "www", true},
		{"label type 0x80", pad("\x80"), "", true},

		// Presentation-format escapes: the result is printable ASCII.
		{"dot inside a label", pad(wire("a.b", "c")), `a\.b.c`, false},
		{"backslash inside a label", pad(wire(`a\b`)), `a\\b`, false},
		{"space and control bytes", pad(wire("a b", "\x00\x01\x1f")), `a\032b.\000\001\031`, false},
		{"quote kept (JSON escapes it)", pad(wire(`say"hi"`)), `say"hi"`, false},
		{"DEL and high bytes", pad(wire("\x7f\x80\xff")), `\127\128\255`, false},
		{"UTF-8 bytes escaped", pad(wire("caf\xc3\xa9")), `caf\195\169`, false},
		{"empty label in the middle ends the name", pad("\x01a\x00\x01b\x00"), "a", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, tr := flow.DNSNameFromWire(c.in)
			if got != c.want || tr != c.truncated {
				t.Errorf("DNSNameFromWire(%q) = %q, %v; want %q, %v", c.in, got, tr, c.want, c.truncated)
			}
			if !utf8.ValidString(got) {
				t.Errorf("not valid UTF-8: %q", got)
			}
			for i := 0; i < len(got); i++ {
				if got[i] < '!' || got[i] > '~' {
					t.Errorf("byte %#x at %d is not printable ASCII: %q", got[i], i, got)
				}
			}
		})
	}
}

// Any input: no panic, printable ASCII out, and a name that ends within the
// bytes (wire zero found, no pointer) round-trips through the escapes.
func FuzzDNSNameFromWire(f *testing.F) {
	f.Add(pad(wire("example", "com")))
	f.Add([]byte{0xc0, 0x0c})
	f.Add([]byte("\x03a.b\x01\\\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, tr := flow.DNSNameFromWire(b)
		for i := 0; i < len(got); i++ {
			if got[i] < '!' || got[i] > '~' {
				t.Fatalf("byte %#x not printable in %q", got[i], got)
			}
		}
		if len(b) > 0 && !tr && got == "" {
			t.Fatalf("complete name %q gave \"\"", b)
		}
		if !tr && got != "." && len(b) > 0 {
			if back := unescape(t, got); !bytes.HasPrefix(b, back) {
				t.Fatalf("%q -> %q -> %q, not a prefix of the input", b, got, back)
			}
		}
	})
}

// unescape turns a presentation-format name back into wire format (with the
// terminating zero).
func unescape(t *testing.T, s string) []byte {
	var out, label []byte
	flush := func() {
		out = append(out, byte(len(label)))
		out = append(out, label...)
		label = label[:0]
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			flush()
		case c == '\\' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			v := int(s[i+1]-'0')*100 + int(s[i+2]-'0')*10 + int(s[i+3]-'0')
			label = append(label, byte(v))
			i += 3
		case c == '\\':
			label = append(label, s[i+1])
			i++
		default:
			label = append(label, c)
		}
	}
	flush()
	return append(out, 0)
}

func TestDNSRcodeName(t *testing.T) {
	want := []string{"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED",
		"YXDOMAIN", "YXRRSET", "NXRRSET", "NOTAUTH", "NOTZONE", "DSOTYPENI",
		"RCODE12", "RCODE13", "RCODE14", "RCODE15"}
	for c, w := range want {
		if got := flow.DNSRcodeName(uint8(c)); got != w {
			t.Errorf("DNSRcodeName(%d) = %q, want %q", c, got, w)
		}
	}
	if got := flow.DNSRcodeName(23); got != "RCODE23" {
		t.Errorf("DNSRcodeName(23) = %q", got)
	}
	if got := flow.DNSRcodeName(255); got != "RCODE255" {
		t.Errorf("DNSRcodeName(255) = %q", got)
	}
}

func dnsRecord() flow.Record {
	r := sampleRecord()
	r.Proto, r.DstPort = 17, 53
	r.DNSID, r.DNSFlags, r.DNSName = 0xbeef, flow.DNSFlagRD, "example.com"
	return r
}

var dnsKeys = []string{"dns_id", "dns_flags", "dns_rcode", "dns_name", "dns_name_truncated",
	"dns_latency_ns", "dns_latency_max_ns", "dns_timeout"}

func TestAppendJSONDNS(t *testing.T) {
	decode := func(r flow.Record) map[string]any {
		t.Helper()
		var got map[string]any
		if err := json.Unmarshal(r.AppendJSON(nil), &got); err != nil {
			t.Fatalf("invalid JSON: %v\n%s", err, r.AppendJSON(nil))
		}
		return got
	}
	r := sampleRecord()
	if r.HasDNS() {
		t.Fatal("HasDNS on a record without DNS fields")
	}
	got := decode(r)
	for _, k := range dnsKeys {
		if _, ok := got[k]; ok {
			t.Errorf("flow without DNS has %s", k)
		}
	}

	for _, c := range []struct {
		name string
		mut  func(r *flow.Record)
		want map[string]any
	}{
		{"query answered NXDOMAIN", func(r *flow.Record) {
			r.DNSRcode, r.DNSLatency, r.DNSLatencyMax = 3, 1500000, 2000000
		}, map[string]any{"dns_id": float64(0xbeef), "dns_flags": float64(0x100), "dns_rcode": "NXDOMAIN",
			"dns_name": "example.com", "dns_name_truncated": false, "dns_latency_ns": 1500000.0,
			"dns_latency_max_ns": 2000000.0, "dns_timeout": false}},
		{"query answered NOERROR", func(r *flow.Record) { r.DNSLatency, r.DNSLatencyMax = 1, 1 },
			map[string]any{"dns_id": float64(0xbeef), "dns_flags": float64(0x100), "dns_rcode": "NOERROR",
				"dns_name": "example.com", "dns_name_truncated": false, "dns_latency_ns": 1.0,
				"dns_latency_max_ns": 1.0, "dns_timeout": false}},
		{"query unanswered: no rcode", func(r *flow.Record) { r.DNSTimeout = true },
			map[string]any{"dns_id": float64(0xbeef), "dns_flags": float64(0x100), "dns_rcode": "",
				"dns_name": "example.com", "dns_name_truncated": false, "dns_latency_ns": 0.0,
				"dns_latency_max_ns": 0.0, "dns_timeout": true}},
		{"answer on the server's flow, SERVFAIL", func(r *flow.Record) {
			r.DNSFlags, r.DNSRcode = flow.DNSFlagQR|flow.DNSFlagRD|flow.DNSFlagRA|2, 2
		}, map[string]any{"dns_id": float64(0xbeef), "dns_flags": float64(0x8182), "dns_rcode": "SERVFAIL",
			"dns_name": "example.com", "dns_name_truncated": false, "dns_latency_ns": 0.0,
			"dns_latency_max_ns": 0.0, "dns_timeout": false}},
		{"answer, unassigned rcode", func(r *flow.Record) { r.DNSFlags, r.DNSRcode = flow.DNSFlagQR|13, 13 },
			map[string]any{"dns_id": float64(0xbeef), "dns_flags": float64(0x800d), "dns_rcode": "RCODE13",
				"dns_name": "example.com", "dns_name_truncated": false, "dns_latency_ns": 0.0,
				"dns_latency_max_ns": 0.0, "dns_timeout": false}},
		{"DSOTYPENI", func(r *flow.Record) { r.DNSFlags, r.DNSRcode = flow.DNSFlagQR|11, 11 },
			map[string]any{"dns_id": float64(0xbeef), "dns_flags": float64(0x800b), "dns_rcode": "DSOTYPENI",
				"dns_name": "example.com", "dns_name_truncated": false, "dns_latency_ns": 0.0,
				"dns_latency_max_ns": 0.0, "dns_timeout": false}},
		{"truncated name, id 0, flags 0", func(r *flow.Record) {
			r.DNSID, r.DNSFlags, r.DNSName, r.DNSNameTruncated = 0, 0, "www.exam", true
		}, map[string]any{"dns_id": 0.0, "dns_flags": 0.0, "dns_rcode": "",
			"dns_name": "www.exam", "dns_name_truncated": true, "dns_latency_ns": 0.0,
			"dns_latency_max_ns": 0.0, "dns_timeout": false}},
		{"root", func(r *flow.Record) { r.DNSName = "." },
			map[string]any{"dns_id": float64(0xbeef), "dns_flags": float64(0x100), "dns_rcode": "",
				"dns_name": ".", "dns_name_truncated": false, "dns_latency_ns": 0.0,
				"dns_latency_max_ns": 0.0, "dns_timeout": false}},
	} {
		r := dnsRecord()
		c.mut(&r)
		if !r.HasDNS() {
			t.Errorf("%s: HasDNS false", c.name)
		}
		got := decode(r)
		for _, k := range dnsKeys {
			if got[k] != c.want[k] {
				t.Errorf("%s: %s = %#v, want %#v", c.name, k, got[k], c.want[k])
			}
		}
		for _, k := range dnsKeys {
			delete(got, k)
		}
		base := decode(sampleRecord())
		base["proto"], base["dst_port"] = 17.0, 53.0
		if len(got) != len(base) {
			t.Errorf("%s: other keys changed: %v", c.name, got)
		}
	}

	// Each DNS field alone makes the keys appear.
	for name, mut := range map[string]func(r *flow.Record){
		"id": func(r *flow.Record) { r.DNSID = 1 }, "flags": func(r *flow.Record) { r.DNSFlags = 1 },
		"rcode": func(r *flow.Record) { r.DNSRcode = 1 }, "name": func(r *flow.Record) { r.DNSName = "a" },
		"truncated": func(r *flow.Record) { r.DNSNameTruncated = true },
		"latency":   func(r *flow.Record) { r.DNSLatency = 1 }, "max": func(r *flow.Record) { r.DNSLatencyMax = 1 },
		"timeout": func(r *flow.Record) { r.DNSTimeout = true },
	} {
		r := sampleRecord()
		mut(&r)
		if !r.HasDNS() {
			t.Errorf("HasDNS false with only %s", name)
		}
		if _, ok := decode(r)["dns_name"]; !ok {
			t.Errorf("no dns_name with only %s", name)
		}
	}

	// Last, after the TLS keys, in the contract's order.
	r = dnsRecord()
	r.QUIC = true
	r.DNSLatency, r.DNSLatencyMax, r.DNSRcode = 5, 7, 3
	js := string(r.AppendJSON(nil))
	if !strings.HasSuffix(js, `"quic":true,"dns_id":48879,"dns_flags":256,"dns_rcode":"NXDOMAIN","dns_name":"example.com","dns_name_truncated":false,"dns_latency_ns":5,"dns_latency_max_ns":7,"dns_timeout":false}`) {
		t.Errorf("DNS keys not last, in order:\n%s", js)
	}
}

// dns_name is escaped as JSON whatever it holds (a Record may come from the
// protobuf, not only from DNSNameFromWire): encoding/json reads back the
// same string, or for invalid UTF-8 what encoding/json itself writes.
func TestAppendJSONDNSNameEscaping(t *testing.T) {
	names := []string{
		"", "example.com", `a\.b`, `say "hi"`, `back\slash`, "\x00\x01\x07\x08\x0b\x0c\x1f",
		"tab\there\nnl\rcr", "\x7f", "café", "日本.jp", "\u2028\u2029", "</script>&",
		"bad\xffutf8\xc3", "\xed\xa0\x80", strings.Repeat(`"\`, 100),
	}
	for i := 0; i < 256; i++ {
		names = append(names, "x"+string([]byte{byte(i)})+"y")
	}
	for _, name := range names {
		r := dnsRecord()
		r.DNSName = name
		js := r.AppendJSON(nil)
		if !json.Valid(js) {
			t.Errorf("%q: invalid JSON %s", name, js)
			continue
		}
		var got struct {
			Name string `json:"dns_name"`
		}
		if err := json.Unmarshal(js, &got); err != nil {
			t.Fatal(err)
		}
		want := strings.ToValidUTF8(name, "\ufffd")
		if !utf8.ValidString(name) {
			// encoding/json replaces each invalid byte.
			b, _ := json.Marshal(name)
			_ = json.Unmarshal(b, &want)
		}
		if got.Name != want {
			t.Errorf("dns_name %q came back as %q, want %q", name, got.Name, want)
		}
		for _, c := range js {
			if c < 0x20 {
				t.Errorf("%q: raw control byte %#x in the JSON", name, c)
			}
		}
	}
}

func TestAppendJSONDNSNoAllocs(t *testing.T) {
	for _, name := range []string{"kubernetes.default.svc.cluster.local", "a\"b\\c\x01\xff\u2028é"} {
		r := dnsRecord()
		r.DNSName, r.DNSRcode, r.DNSLatency, r.DNSLatencyMax, r.DNSTimeout = name, 3, 1500000, 9000000, true
		buf := make([]byte, 0, 2048)
		if n := testing.AllocsPerRun(100, func() { buf = r.AppendJSON(buf[:0]) }); n != 0 {
			t.Fatalf("%v allocations per DNS record (name %q)", n, name)
		}
		r.DNSFlags, r.DNSRcode = flow.DNSFlagQR|14, 200 // unnamed rcode
		if n := testing.AllocsPerRun(100, func() { buf = r.AppendJSON(buf[:0]) }); n != 0 {
			t.Fatalf("%v allocations per DNS record with an unnamed rcode", n)
		}
	}
}

// DNSNameFromWire allocates the name once; DNSNameFromWireReuse nothing when
// the name is the one it is given (a Record refilled for the same flow).
func TestDNSNameFromWireAllocs(t *testing.T) {
	in := pad(wire("kubernetes", "default", "svc", "cluster", "local"))
	if n := testing.AllocsPerRun(100, func() { flow.DNSNameFromWire(in) }); n != 1 {
		t.Errorf("DNSNameFromWire: %v allocations, want 1", n)
	}
	prev, _ := flow.DNSNameFromWire(in)
	var got string
	if n := testing.AllocsPerRun(100, func() { got, _ = flow.DNSNameFromWireReuse(prev, in) }); n != 0 {
		t.Errorf("DNSNameFromWireReuse, same name: %v allocations", n)
	}
	if got != prev {
		t.Errorf("got %q", got)
	}
	for _, c := range [][]byte{in, []byte("\x03www\x07exam"), {0}, nil, pad(wire("a.b"))} {
		w, wt := flow.DNSNameFromWire(c)
		for _, prev := range []string{"", "other", w} {
			if g, gt := flow.DNSNameFromWireReuse(prev, c); g != w || gt != wt {
				t.Errorf("DNSNameFromWireReuse(%q, %q) = %q, %v; want %q, %v", prev, c, g, gt, w, wt)
			}
		}
	}
	// Longer than the kernel copies (a caller's own buffer): still right.
	long := []byte(wire(strings.Repeat("x", 63), strings.Repeat("y", 63)))
	if g, tr := flow.DNSNameFromWire(long); g != strings.Repeat("x", 63)+"."+strings.Repeat("y", 63) || tr {
		t.Errorf("long name: %q, %v", g, tr)
	}
}

package flow

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostileNames are names an attacker chooses (an interface name, a netns,
// a DNS name in a query): terminal escape sequences, C1 controls, invalid
// UTF-8, quotes, backslashes, JavaScript line ends.
var hostileNames = []string{
	"", "eth0", "veth1a2b3c", "a b~!", "\x1b[31mred\x1b[0m", "\x1b]0;title\x07", "nul\x00", "del\x7f",
	"csi\u009b31m", "\xff\xfe", "half\xe2\x80", `q"uote`, `back\slash`, "tab\tcr\rlf\n", "ls\u2028ps\u2029", "abc\u202edcba", "iso\u2066x\u2069",
	"é", "ünïcode-if", "\U0001F600",
}

// A name is written as valid JSON that a real decoder reads back (invalid
// UTF-8 as U+FFFD, as encoding/json writes it), with no raw control byte
// (C0, DEL, C1) left for a terminal to act on; the fast path writes what
// encoding/json writes.
func TestAppendQuoteIsSafeJSON(t *testing.T) {
	for _, s := range hostileNames {
		got := appendQuote([]byte("x"), s)[1:]
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("%q: %s is not JSON: %v", s, got, err)
			continue
		}
		if want := valid(s); back != want {
			t.Errorf("%q: read back %q, want %q", s, back, want)
		}
		if bad := rawControl(got); bad >= 0 {
			t.Errorf("%q: %s has a raw control character at %d", s, got, bad)
		}
		if got2 := appendJSONString(nil, s); !bytes.Equal(got2, got) {
			t.Errorf("%q: fast path %s, slow path %s", s, got, got2)
		}
		if std, _ := json.Marshal(s); isPlain(s) && !bytes.Equal(std, got) {
			t.Errorf("%q: %s, encoding/json writes %s", s, got, std)
		}
	}
}

// Every string field of a record (interfaces, drops, DNS) comes out as
// valid JSON with no raw control character.
func TestAppendJSONHostileNames(t *testing.T) {
	for _, s := range hostileNames {
		r := Record{Interfaces: []Interface{{Name: s, Netns: s}}, Sampling: 1,
			DropsFields: DropsFields{DropPackets: 1, DropCause: s, DropTCPState: s}, DNSFields: DNSFields{DNSID: 1, DNSName: s}}
		js := r.AppendJSON(nil)
		var got struct {
			Interfaces []struct{ Name, Netns string }
			DropCause  string `json:"drop_cause"`
			DNSName    string `json:"dns_name"`
		}
		if err := json.Unmarshal(js, &got); err != nil {
			t.Errorf("%q: invalid JSON: %v\n%s", s, err, js)
			continue
		}
		want := valid(s)
		if got.Interfaces[0].Name != want || got.Interfaces[0].Netns != want || got.DropCause != want || got.DNSName != want {
			t.Errorf("%q: read back %+v, want %q everywhere", s, got, want)
		}
		if bad := rawControl(js); bad >= 0 {
			t.Errorf("%q: raw control character at %d of %s", s, bad, js)
		}
	}
}

// rawControl is the offset of the first C0, DEL or C1 control character,
// line or paragraph separator, bidirectional control (or invalid UTF-8) in
// b, -1 for none.
func rawControl(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r == utf8.RuneError && n == 1) || (r >= 0x2028 && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
			return i
		}
		i += n
	}
	return -1
}

// valid is s with each byte of invalid UTF-8 replaced by U+FFFD, as
// encoding/json writes it.
func valid(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r) // range yields U+FFFD per invalid byte
	}
	return b.String()
}

func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

package textfmt

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "",
		"node-a":                     "node-a",
		"é-ü":                        "é-ü",
		"\x1b[31mred\x1b[0m":         `\x1b[31mred\x1b[0m`,
		"\x1b]0;title\x07":           `\x1b]0;title\a`,
		"a\nb\rc\td":                 `a\nb\rc\td`,
		"del\x7f":                    `del\x7f`,
		"csi\u009b2J":                `csi\u009b2J`,
		"\xff\xfe":                   `\xff\xfe`,
		"ls\u2028ps\u2029":           `ls\u2028ps\u2029`,
		"abc\u202edcba":              `abc\u202edcba`,
		"iso\u2066x\u2069":           `iso\u2066x\u2069`,
		"\U0001F600 ok \\ \"quote\"": "\U0001F600 ok \\ \"quote\"",
	} {
		if got := Safe(in); got != want {
			t.Errorf("Safe(%q) = %q, want %q", in, got, want)
		}
	}
}

// hostile is a name with a terminal escape sequence, a C1 CSI, a line
// separator and a bidirectional override.
const hostile = "\x1b[2J\u009b31m\u2028\u202eX"

// rawUnsafe is the offset of the first rune Safe escapes (or invalid
// UTF-8) in s, -1 for none.
func rawUnsafe(s string) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unsafeRune(r) || (r == utf8.RuneError && n == 1) {
			return i
		}
		i += n
	}
	return -1
}

// Every name of a flow (node, interfaces, netns, drop cause, DNS name,
// Kubernetes names of both ends) reaches the table (the collector's
// --output table, observe's) and the compact line escaped.
func TestTextFormatsEscapeNames(t *testing.T) {
	k := enriched.K8sContext{Kind: enriched.KindPod, Namespace: hostile, Name: hostile, Workload: hostile, WorkloadKind: hostile}
	f := enriched.Flow{NodeName: hostile, Enriched: true, Src: k, Dst: enriched.K8sContext{Subnet: hostile}}
	f.SrcAddr, f.DstAddr = netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	f.Interfaces = []flow.Interface{{Name: hostile, Netns: hostile}}
	f.DropPackets, f.DropCause, f.DNSID, f.DNSName = 1, hostile, 1, hostile
	tb := NewTable(true, true)
	tb.Widen(&f)
	for name, out := range map[string]string{"table": string(tb.AppendRow(nil, &f)), "compact": string(AppendCompact(nil, &f))} {
		if i := rawUnsafe(out); i >= 0 {
			t.Errorf("%s: raw control at %d: %q", name, i, out)
		}
		if n := strings.Count(out, `\x1b[2J\u009b31m\u2028\u202eX`); n < 4 {
			t.Errorf("%s: %d escaped names in %q", name, n, out)
		}
	}
}

// SafeJSON escapes what protojson leaves raw; the text reads back the same.
func TestSafeJSON(t *testing.T) {
	js := []byte("{\"a\": \"" + hostile[4:] + "é\\u001b\",\n\t\"b\": 1}")
	out := SafeJSON(nil, js)
	if i := rawUnsafe(strings.NewReplacer("\n", "", "\t", "").Replace(string(out))); i >= 0 {
		t.Fatalf("raw control at %d: %q", i, out)
	}
	var a, b map[string]any
	if err := json.Unmarshal(js, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if a["a"] != b["a"] || a["b"] != b["b"] {
		t.Errorf("read back %v, want %v", b, a)
	}
}

package flowrules

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds Parse any bytes, as a rules file (--filter-rules) may
// hold: it returns rules or an *Error, never panics, and rules it returns
// compile (they passed Check) under either default action. Seeds: the
// documented examples and a few broken documents (they run as a normal
// test; `make fuzz` mutates them).
func FuzzParse(f *testing.F) {
	examples, _ := filepath.Glob("../../../docs/examples/filters/*.yaml")
	for _, p := range examples {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		"", "[]", "null", "- action: accept\n", "- {action: reject, ports: 443, cidr: 10.0.0.0/8}",
		"- action: accept\n  src_ports: 1-65535\n  protocol: tcp\n  tcp_flags: SYN",
		"- &a {action: accept}\n- *a\n", "- action: [x", "{}", "- action: accept\n  cidr: 10.0.0.0/33",
		`[{"action":"accept","dst_ports":"80,443,8000-8080"}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, err := Parse(data)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T, want *Error: %v", err, err)
			}
			return
		}
		for _, def := range []Action{Accept, Reject} {
			if _, err := Compile(rules, def); err != nil {
				t.Fatalf("parsed rules do not compile: %v\n%q", err, data)
			}
		}
	})
}

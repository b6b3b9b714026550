package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"
)

// The collector's and the agent's logs use slog's text handler (main.go),
// which quotes a value with a control character, a C1 control, a line
// separator, a bidirectional control or invalid UTF-8 with Go escapes: an
// untrusted string (a peer's error, a node name in a refusal) cannot drive
// the terminal of whoever reads the log. slog's JSON handler would not do
// (it leaves DEL, C1 and bidirectional controls raw): keep the text one.
func TestLogEscapesControlCharacters(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	hostile := "\x1b[2J\x07\x7f\u009b\u2028\u202e\xff"
	log.Warn("refused an invalid flow", "node", hostile, "error", "flows[0]: node_name "+hostile)
	out := buf.String()
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRuneInString(out[i:])
		if (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) || r == 0x2028 || r == 0x202e || (r == utf8.RuneError && n == 1) {
			t.Fatalf("raw %U at %d: %q", r, i, out)
		}
		i += n
	}
	if want := `node="\x1b[2J\a\x7f\u009b\u2028\u202e\xff"`; !strings.Contains(out, want) {
		t.Errorf("%q lacks %s", out, want)
	}
}

package textfmt

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Safe is s as a terminal may show it: s itself when it holds no control
// character, else with each control character (C0, DEL, C1), each line or
// paragraph separator (U+2028, U+2029), each bidirectional override or
// isolate (U+202A to U+202E, U+2066 to U+2069: they reorder what follows)
// and each byte of invalid UTF-8 written as a Go escape (\x1b, \u009b,
// \u202e, \xff). Every name the text formats print goes through it: node
// names, interfaces, drop causes and DNS names come from agents and from
// the network, Kubernetes names from other tenants.
func Safe(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return escape(s)
		}
	}
	return s
}

func unsafeRune(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == '\u2028' || r == '\u2029' ||
		(r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case unsafeRune(r):
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u009b', '\n'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// SafeJSON appends the JSON text js to b with the characters Safe escapes
// written as \uXXXX escapes (invalid UTF-8 as \ufffd): in JSON they can
// only stand in strings, where the escape reads back as the same text.
// For JSON from encoders that leave them raw (protojson leaves DEL, C1,
// U+2028 and the bidirectional controls).
func SafeJSON(b, js []byte) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(js); {
		c := js[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, n := utf8.DecodeRune(js[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			r = utf8.RuneError
		case !unsafeRune(r) || r == '\n' || r == '\t' || r == '\r':
			i += n // raw C0 is whitespace between tokens in valid JSON
			continue
		}
		b = append(b, js[start:i]...)
		b = append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
		i += n
		start = i
	}
	return append(b, js[start:]...)
}

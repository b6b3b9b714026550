package flow

import (
	"strconv"
	"testing"
)

// appendQuote writes what strconv.AppendQuote writes, on its fast path
// (printable ASCII) and off it.
func TestAppendQuoteMatchesStrconv(t *testing.T) {
	for _, s := range []string{"", "eth0", "veth1a2b3c", "host", "SKB_DROP_REASON_NETFILTER_DROP", "a b~!",
		`q"uote`, `back\slash`, "tab\t", "nul\x00", "del\x7f", "é", "\xff", "ünïcode-if"} {
		if got, want := string(appendQuote([]byte("x"), s)), string(strconv.AppendQuote([]byte("x"), s)); got != want {
			t.Errorf("appendQuote(%q) = %s, want %s", s, got, want)
		}
	}
}

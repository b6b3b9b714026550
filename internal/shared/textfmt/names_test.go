package textfmt

import "testing"

// ParseProtocol takes Protocols' names in any case and numbers 0 to 255,
// and gives back what ProtoName prints from.
func TestParseProtocol(t *testing.T) {
	for s, want := range map[string]uint8{"tcp": 6, "UDP": 17, "IcmpV6": 58, "0": 0, "47": 47, "255": 255} {
		if got, err := ParseProtocol(s); err != nil || got != want {
			t.Errorf("ParseProtocol(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "bogus", "256", "-1", "6.0"} {
		if n, err := ParseProtocol(s); err == nil {
			t.Errorf("ParseProtocol(%q) = %d, want an error", s, n)
		}
	}
	for name, n := range Protocols {
		if got, err := ParseProtocol(ProtoName(n)); err != nil || got != n {
			t.Errorf("ParseProtocol(ProtoName(%d)) = %d, %v (name %s)", n, got, err, name)
		}
	}
}

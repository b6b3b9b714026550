package ifname

import "testing"

func TestMatch(t *testing.T) {
	s, err := Compile([]string{"eth0", "/^veth/", "/^br-[0-9a-f]{4}$/"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"eth0": true, "eth1": false, "xeth0": false,
		"veth12": true, "myveth": false,
		"br-1a2b": true, "br-1a2b3": false, "": false,
	} {
		if got := s.Match(name); got != want {
			t.Errorf("Match(%q) = %v, want %v", name, got, want)
		}
	}
	if s.Empty() {
		t.Error("Empty() = true for three entries")
	}
	var zero Set
	if !zero.Empty() || zero.Match("eth0") {
		t.Error("the zero Set must be empty and match nothing")
	}
}

func TestCompileErrors(t *testing.T) {
	for entry, want := range map[string]string{
		"/[/":   "entry \"/[/\": error parsing regexp: missing closing ]: `[`",
		"/":     `entry "/": a pattern must be written /regex/`,
		"/eth0": `entry "/eth0": a pattern must be written /regex/`,
	} {
		_, err := Compile([]string{"lo", entry})
		if err == nil || err.Error() != want {
			t.Errorf("Compile(%q) error:\n got  %v\n want %s", entry, err, want)
		}
	}
}

package config

import "testing"

func TestInterfaceSelection(t *testing.T) {
	tests := []struct {
		name             string
		include, exclude []string
		allowed, denied  []string
	}{
		{"empty allows all", nil, nil, []string{"eth0", "lo", "veth1"}, nil},
		{"default exclude", nil, []string{"lo"}, []string{"eth0", "lo0", "veth1"}, []string{"lo"}},
		{"exact names", []string{"eth0", "eth1"}, nil, []string{"eth0", "eth1"}, []string{"eth", "eth10", "eth0.100"}},
		{"pattern unanchored as written", []string{"/veth/"}, nil, []string{"veth1", "myveth"}, []string{"eth0"}},
		{"pattern anchored", []string{"/^eth[0-9]{1,2}$/"}, nil, []string{"eth0", "eth12"}, []string{"eth123", "xeth0", "eth"}},
		{"exclude wins", []string{"/^eth/"}, []string{"eth1", "/\\.100$/"}, []string{"eth0"}, []string{"eth1", "eth0.100", "lo"}},
		{"names and patterns mixed", []string{"lo", "/^br-/"}, nil, []string{"lo", "br-1a2b"}, []string{"eth0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewInterfaceSelection(tt.include, tt.exclude)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range tt.allowed {
				if !f.Allowed(n) {
					t.Errorf("Allowed(%q) = false, want true", n)
				}
			}
			for _, n := range tt.denied {
				if f.Allowed(n) {
					t.Errorf("Allowed(%q) = true, want false", n)
				}
			}
		})
	}
}

func TestInterfaceSelectionZeroValueAllowsAll(t *testing.T) {
	var f InterfaceSelection
	if !f.Allowed("eth0") {
		t.Error("zero InterfaceSelection denied eth0")
	}
}

func TestInterfaceSelectionErrors(t *testing.T) {
	tests := []struct {
		include, exclude []string
		want             string
	}{
		{[]string{"/[/"}, nil, "include entry \"/[/\": error parsing regexp: missing closing ]: `[`"},
		{nil, []string{"lo", "/*/"}, "exclude entry \"/*/\": error parsing regexp: missing argument to repetition operator: `*`"},
		{[]string{"/"}, nil, `include entry "/": a pattern must be written /regex/`},
	}
	for _, tt := range tests {
		_, err := NewInterfaceSelection(tt.include, tt.exclude)
		if err == nil || err.Error() != tt.want {
			t.Errorf("NewInterfaceSelection(%q, %q) error:\n got  %v\n want %s", tt.include, tt.exclude, err, tt.want)
		}
	}
}

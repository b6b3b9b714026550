package registry_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/feature/registry"
)

// --features accepts exactly the registered features, in the registry's
// order; its default enables the features whose Config says so (drops,
// rtt, retransmits, tcp), and the others (xlat, tls, dns) are opt-in.
func TestConfigFeaturesAreTheRegistry(t *testing.T) {
	c, err := config.Load(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var defaults []string
	for _, f := range registry.New() {
		if f.Config().Default {
			defaults = append(defaults, f.Name())
		}
	}
	if got, want := strings.Join(c.Features, ","), "drops,rtt,retransmits,tcp"; got != want || want != strings.Join(defaults, ",") {
		t.Fatalf("default --features %q, registry %q", got, want)
	}
	for _, name := range registry.Names() {
		c, err := config.Load([]string{"--features=" + name}, nil)
		if err != nil {
			t.Fatalf("--features=%s: %v", name, err)
		}
		if !slices.Equal(c.Features, []string{name}) {
			t.Fatalf("--features=%s gives %q", name, c.Features)
		}
	}
	if _, err := registry.Select([]string{"nope"}); err == nil || err.Error() != `unknown feature "nope"` {
		t.Fatalf("Select(nope) = %v", err)
	}
}

// Every feature names the record fields it fills, each once.
func TestFeaturesDeclareTheirFields(t *testing.T) {
	seen := map[string]string{}
	for _, f := range registry.New() {
		if f.Doc() == "" || len(f.Fields()) == 0 {
			t.Errorf("feature %s lacks docs or fields", f.Name())
		}
		for _, fld := range f.Fields() {
			if other, ok := seen[fld]; ok {
				t.Errorf("field %s filled by %s and %s", fld, other, f.Name())
			}
			seen[fld] = f.Name()
		}
	}
	if !slices.Contains(registry.Names(), "drops") {
		t.Fatal("drops is not registered")
	}
}

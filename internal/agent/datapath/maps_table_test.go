package datapath

import (
	"slices"
	"strings"
	"testing"
)

// Every map bpf/maps.h declares is in the one table of maps, so Load creates
// it once and every program gets that one. A map left out is silently
// created again, privately, for each collection the agent loads (each
// namespace's TC programs, each hook): the fragment map once was.
func TestMapTableHasEveryMap(t *testing.T) {
	spec, err := loadDatapath()
	if err != nil {
		t.Fatal(err)
	}
	var m Maps
	var table []string
	for _, e := range m.table() {
		table = append(table, e.name)
	}
	for name := range spec.Maps {
		if strings.HasPrefix(name, ".") { // .rodata and friends: per-load constants
			continue
		}
		if !slices.Contains(table, name) {
			t.Errorf("map %s of bpf/maps.h is not in the map table (internal/agent/datapath/maps.go)", name)
		}
	}
}

package tcp

import (
	"slices"
	"testing"

	"github.com/flowlens/flowlens/pkg/flow"
)

// The fields the feature fills are its record group's, in the same order.
func TestFieldsAreTheGroups(t *testing.T) {
	g, ok := flow.GroupNamed("tcp")
	if !ok {
		t.Fatal("no tcp group in pkg/flow")
	}
	if f := New().Fields(); !slices.Equal(f, g.JSONFields) {
		t.Errorf("Fields %v, group %v", f, g.JSONFields)
	}
}

package config

import (
	"fmt"

	"github.com/flowlens/flowlens/internal/agent/ifname"
)

// InterfaceSelection decides which interfaces to watch from --interfaces
// and --exclude-interfaces: it selects interfaces by name and filters no
// flow (that is the flow rules', package flowrules). Entries written
// /like this/ are regular expressions, matched as written (unanchored
// unless they use ^ and $); other entries are exact names (the syntax is
// package ifname's). The zero InterfaceSelection allows every name.
type InterfaceSelection struct {
	include, exclude ifname.Set
}

// NewInterfaceSelection compiles the include and exclude lists. An empty include list
// allows every name; a name matching the exclude list is never allowed.
func NewInterfaceSelection(include, exclude []string) (*InterfaceSelection, error) {
	in, err := ifname.Compile(include)
	if err != nil {
		return nil, fmt.Errorf("include %w", err)
	}
	ex, err := ifname.Compile(exclude)
	if err != nil {
		return nil, fmt.Errorf("exclude %w", err)
	}
	return &InterfaceSelection{include: in, exclude: ex}, nil
}

// Allowed reports whether the interface called name should be watched.
func (f *InterfaceSelection) Allowed(name string) bool {
	if f.exclude.Match(name) {
		return false
	}
	return f.include.Empty() || f.include.Match(name)
}

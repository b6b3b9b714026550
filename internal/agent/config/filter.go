package config

import (
	"fmt"

	"github.com/flowlens/flowlens/internal/agent/ifname"
)

// NameFilter decides which interfaces to watch from --interfaces and
// --exclude-interfaces. Entries written /like this/ are regular expressions,
// matched as written (unanchored unless they use ^ and $); other entries are
// exact names (the syntax is package ifname's). The zero NameFilter allows
// every name.
type NameFilter struct {
	include, exclude ifname.Set
}

// NewNameFilter compiles the include and exclude lists. An empty include list
// allows every name; a name matching the exclude list is never allowed.
func NewNameFilter(include, exclude []string) (*NameFilter, error) {
	in, err := ifname.Compile(include)
	if err != nil {
		return nil, fmt.Errorf("include %w", err)
	}
	ex, err := ifname.Compile(exclude)
	if err != nil {
		return nil, fmt.Errorf("exclude %w", err)
	}
	return &NameFilter{include: in, exclude: ex}, nil
}

// Allowed reports whether the interface called name should be watched.
func (f *NameFilter) Allowed(name string) bool {
	if f.exclude.Match(name) {
		return false
	}
	return f.include.Empty() || f.include.Match(name)
}

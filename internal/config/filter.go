package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// NameFilter decides which interfaces to watch from --interfaces and
// --exclude-interfaces. Entries written /like this/ are regular expressions,
// matched as written (unanchored unless they use ^ and $); other entries are
// exact names. Linux interface names cannot contain "/", so the two never
// collide. The zero NameFilter allows every name.
type NameFilter struct {
	include, exclude nameSet
}

// NewNameFilter compiles the include and exclude lists. An empty include list
// allows every name; a name matching the exclude list is never allowed.
func NewNameFilter(include, exclude []string) (*NameFilter, error) {
	in, err := compileNames(include)
	if err != nil {
		return nil, fmt.Errorf("include %w", err)
	}
	ex, err := compileNames(exclude)
	if err != nil {
		return nil, fmt.Errorf("exclude %w", err)
	}
	return &NameFilter{include: in, exclude: ex}, nil
}

// Allowed reports whether the interface called name should be watched.
func (f *NameFilter) Allowed(name string) bool {
	if f.exclude.match(name) {
		return false
	}
	return f.include.empty() || f.include.match(name)
}

type nameSet struct {
	names    map[string]bool
	patterns []*regexp.Regexp
}

func (s nameSet) empty() bool { return len(s.names) == 0 && len(s.patterns) == 0 }

func (s nameSet) match(name string) bool {
	if s.names[name] {
		return true
	}
	for _, re := range s.patterns {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

func compileNames(entries []string) (nameSet, error) {
	s := nameSet{names: map[string]bool{}}
	for _, e := range entries {
		re, err := compileEntry(e)
		if err != nil {
			return nameSet{}, fmt.Errorf("entry %q: %w", e, err)
		}
		if re != nil {
			s.patterns = append(s.patterns, re)
		} else {
			s.names[e] = true
		}
	}
	return s, nil
}

// compileEntry returns the regexp of a /regex/ entry, or nil for a plain name.
func compileEntry(e string) (*regexp.Regexp, error) {
	if !strings.HasPrefix(e, "/") {
		return nil, nil
	}
	if len(e) < 2 || !strings.HasSuffix(e, "/") {
		return nil, errors.New("a pattern must be written /regex/")
	}
	return regexp.Compile(e[1 : len(e)-1])
}

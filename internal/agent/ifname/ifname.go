package ifname

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Set is a compiled list of names and /regex/ patterns. Patterns are matched
// as written (unanchored unless they use ^ and $); other entries are exact
// names. Linux interface names cannot contain "/", so the two never collide.
// The zero Set is empty and matches nothing.
type Set struct {
	names    map[string]bool
	patterns []*regexp.Regexp
}

// Compile compiles entries. The error names the bad entry:
// `entry "/[/": error parsing regexp: ...`.
func Compile(entries []string) (Set, error) {
	s := Set{names: map[string]bool{}}
	for _, e := range entries {
		re, err := CompileEntry(e)
		if err != nil {
			return Set{}, fmt.Errorf("entry %q: %w", e, err)
		}
		if re != nil {
			s.patterns = append(s.patterns, re)
		} else {
			s.names[e] = true
		}
	}
	return s, nil
}

// CompileEntry returns the regexp of a /regex/ entry, or nil for a plain name.
func CompileEntry(e string) (*regexp.Regexp, error) {
	if !strings.HasPrefix(e, "/") {
		return nil, nil
	}
	if len(e) < 2 || !strings.HasSuffix(e, "/") {
		return nil, errors.New("a pattern must be written /regex/")
	}
	return regexp.Compile(e[1 : len(e)-1])
}

// Empty reports whether the set has no entries.
func (s Set) Empty() bool { return len(s.names) == 0 && len(s.patterns) == 0 }

// Match reports whether name is one of the names or matches a pattern.
func (s Set) Match(name string) bool {
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

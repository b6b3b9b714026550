package cliconf

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// loadFile applies the YAML file at path to c. source is the flag or variable
// that named the file, for the error when it cannot be read.
//
// The file is walked as a node tree rather than decoded into a struct with
// KnownFields: that keeps the options table the only list of keys, lets a
// list be written either as a YAML sequence or as a comma string, and gives
// errors with the file, line and key. A structured option (Option.SetNode)
// gets its value as a node, and its errors keep the file and a line. A key with no value (null) is treated as
// absent and keeps the lower-precedence value.
func (s *Spec[C]) loadFile(c *C, path, source string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return Invalid(source, path, PathReason(err))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	root := resolve(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: the file must be a mapping of option names to values", path, root.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		o := s.optionByKey(k.Value)
		if o == nil {
			return fmt.Errorf("%s:%d: unknown key %q", path, k.Line, k.Value)
		}
		if seen[k.Value] {
			return fmt.Errorf("%s:%d: key %q given twice", path, k.Line, k.Value)
		}
		seen[k.Value] = true
		if err := applyNode(c, o, v); err != nil {
			line := v.Line
			var le *lineError
			if errors.As(err, &le) {
				line = le.line
			}
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
	}
	return nil
}

func applyNode[C any](c *C, o *Option[C], v *yaml.Node) error {
	key := o.YAMLKey()
	switch {
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null":
		return nil
	case (v.Kind == yaml.SequenceNode || v.Kind == yaml.MappingNode) && o.SetNode != nil:
		return o.SetNode(c, v)
	case v.Kind == yaml.ScalarNode:
		if err := o.Apply(c, v.Value); err != nil {
			return Invalid(key, v.Value, err)
		}
		return nil
	case v.Kind == yaml.SequenceNode && o.SetList != nil:
		var items []string
		for _, e := range v.Content {
			e = resolve(e)
			if e.Kind != yaml.ScalarNode {
				return fmt.Errorf("invalid %s: list entries must be plain values", key)
			}
			if s := strings.TrimSpace(e.Value); s != "" {
				items = append(items, s)
			}
		}
		if err := o.SetList(c, items); err != nil {
			return Invalid(key, strings.Join(items, ","), err)
		}
		return nil
	case v.Kind == yaml.SequenceNode:
		return fmt.Errorf("invalid %s: must be a single value, not a list", key)
	}
	return errors.New("invalid " + key + ": must be a value or a list")
}

// AtLine is a SetNode error about the given line of the YAML file, inside the
// option's value: the file's error then names that line rather than the
// value's first.
func AtLine(line int, err error) error { return &lineError{line, err} }

type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return e.err.Error() }
func (e *lineError) Unwrap() error { return e.err }

// resolve follows YAML aliases (*name) to the node they refer to.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func (s *Spec[C]) optionByKey(key string) *Option[C] {
	for _, o := range s.Options {
		if o.YAMLKey() == key {
			return o
		}
	}
	return nil
}

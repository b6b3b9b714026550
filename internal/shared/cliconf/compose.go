package cliconf

import (
	"slices"

	"gopkg.in/yaml.v3"
)

// The helpers here build a binary's table from rows written elsewhere, so
// that an option group several binaries need (a TLS client, a Kafka
// connection) or the options a package owns (a feature's) are written once,
// over their own small struct, and placed into each binary's configuration.

// Embed lifts options over a part P of a configuration C (a field of it, or
// a struct it holds) into options over C: each row keeps its name, default,
// usage and section, and sets the part that part returns. This is how a
// package that cannot import the binary's configuration (which imports it)
// defines its rows: over its own options struct, e.g.
//
//	cliconf.Embed(func(c *Config) *dns.Options { return &c.DNS }, dns.Flags())
func Embed[C, P any](part func(*C) *P, opts []*Option[P]) []*Option[C] {
	out := make([]*Option[C], len(opts))
	for i, o := range opts {
		n := &Option[C]{Name: o.Name, Arg: o.Arg, Default: o.Default, Usage: o.Usage,
			Section: o.Section, Bool: o.Bool, Repeat: o.Repeat}
		if set := o.Set; set != nil {
			n.Set = func(c *C, s string) error { return set(part(c), s) }
		}
		if set := o.SetList; set != nil {
			n.SetList = func(c *C, items []string) error { return set(part(c), items) }
		}
		if set := o.SetNode; set != nil {
			n.SetNode = func(c *C, node *yaml.Node) error { return set(part(c), node) }
		}
		out[i] = n
	}
	return out
}

// InSection puts the rows of every group under the help heading title (see
// Option.Section) and returns them as one list, in order. It sets the rows'
// Section in place: groups are built for one table.
func InSection[C any](title string, groups ...[]*Option[C]) []*Option[C] {
	out := slices.Concat(groups...)
	for _, o := range out {
		o.Section = title
	}
	return out
}

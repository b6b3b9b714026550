package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/flowlens/flowlens/internal/shared/cliconf"
)

// The optional kernel features are listed once, in
// internal/agent/feature/registry, which hands them to this package
// (SetFeatures, from its init): --features (its usage, its default, the names
// it accepts) and every feature's own options derive from that list, and this
// package, which the operator links, stays free of the kernel side. Whatever
// loads an agent configuration links the registry (the agent does, through
// package agent); Load refuses to run without it.

// A Feature is what the configuration knows of one optional kernel feature.
type Feature struct {
	Name string
	// Brief is a few words for the --features usage, "" when the name says
	// enough.
	Brief string
	// Default enables the feature when --features is not given.
	Default bool
	// Options are the feature's own settings (e.g. --dns-ports), listed
	// after --features; they keep their values with FeatureOptions.
	Options []*cliconf.Option[Config]
	// Validate checks the options once all are loaded, naming the flag at
	// fault; nil when there is nothing to check.
	Validate func(*Config) error
}

// features are the registered features, in the registry's order.
var features []Feature

var errNoFeatures = errors.New("no kernel features registered: link internal/agent/feature/registry")

// SetFeatures registers the optional kernel features (the registry's list).
func SetFeatures(fs []Feature) {
	features = fs
	spec.Options = table()
}

// table is the options table with the features' rows: the --features row
// takes its default and usage from them, and their own options follow it,
// in its help section.
func table() []*cliconf.Option[Config] {
	var out []*cliconf.Option[Config]
	for _, o := range options {
		out = append(out, o)
		if o.Name == "features" {
			o.Default, o.Usage = featuresDefault(), featuresUsage()
			for _, f := range features {
				out = append(out, cliconf.InSection(o.Section, f.Options)...)
			}
		}
	}
	return out
}

// FeatureOptions returns the options of the named feature, a *T of the
// feature's own type, made on first use (the defaults set every option, so
// a loaded configuration has every feature's options, enabled or not).
func FeatureOptions[T any](c *Config, name string) *T {
	if o, ok := c.FeatureOptions[name].(*T); ok {
		return o
	}
	if c.FeatureOptions == nil {
		c.FeatureOptions = map[string]any{}
	}
	o := new(T)
	c.FeatureOptions[name] = o
	return o
}

func featuresDefault() string {
	var on []string
	for _, f := range features {
		if f.Default {
			on = append(on, f.Name)
		}
	}
	return strings.Join(on, ",")
}

func featuresUsage() string {
	var names []string
	for _, f := range features {
		if f.Brief != "" {
			names = append(names, fmt.Sprintf("%s (%s)", f.Name, f.Brief))
		} else {
			names = append(names, f.Name)
		}
	}
	return "optional measurements: " + strings.Join(names, ", ") + `; "none" or empty for none`
}

// setFeatures takes --features: registered names, in any order (kept in
// the registry's), or "none" alone.
func setFeatures(c *Config, items []string) error {
	want := map[string]bool{}
	for _, it := range items {
		if it == "none" {
			if len(items) > 1 {
				return errors.New(`"none" cannot be combined with features`)
			}
			continue
		}
		if !known(it) {
			var names []string
			for _, f := range features {
				names = append(names, f.Name)
			}
			return fmt.Errorf("unknown feature %q: must be one of %s, or none", it, strings.Join(names, ", "))
		}
		want[it] = true
	}
	c.Features = nil
	for _, f := range features {
		if want[f.Name] {
			c.Features = append(c.Features, f.Name)
		}
	}
	return nil
}

func known(name string) bool {
	for _, f := range features {
		if f.Name == name {
			return true
		}
	}
	return false
}

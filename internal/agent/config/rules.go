package config

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/flowlens/flowlens/internal/agent/flowrules"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
)

// Flow filter rules (package filter): --filter-rules names a file, or the
// config file lists the rules inline under filter_rules; one or the other.

// FilterTable compiles FilterRules and FilterDefault into the tables the
// datapath loads. Without rules it is an empty table that accepts every
// packet.
func (c *Config) FilterTable() (*flowrules.Table, error) {
	return flowrules.Compile(c.FilterRules, c.FilterDefault)
}

// setFilterRulesFile reads and parses the rules file when the path is set,
// not in Validate: so the error names the flag or variable that gave the
// path, and a file named while the config file already lists rules inline
// (the file is applied first) is caught here.
func setFilterRulesFile(c *Config, path string) error {
	if path == "" {
		if c.FilterRulesFile != "" {
			c.FilterRules = nil // an explicit --filter-rules= drops an earlier file
		}
		c.FilterRulesFile = ""
		return nil
	}
	if c.FilterRulesFile == "" && len(c.FilterRules) > 0 {
		return errors.New("the config file lists filter_rules inline: give the rules in one place")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return cliconf.PathReason(err)
	}
	rules, err := flowrules.Parse(data)
	if err != nil {
		if line := errorLine(err); line > 0 {
			return fmt.Errorf("line %d: %w", line, err)
		}
		return err
	}
	c.FilterRules, c.FilterRulesFile = rules, path
	return nil
}

// setFilterRulesInline takes the rules listed under the config file's
// filter_rules key; the error points at the line at fault.
func setFilterRulesInline(c *Config, n *yaml.Node) error {
	rules, err := flowrules.ParseNode(n)
	if err != nil {
		if line := errorLine(err); line > 0 {
			return cliconf.AtLine(line, err)
		}
		return err
	}
	c.FilterRules, c.FilterRulesFile = rules, ""
	return nil
}

func errorLine(err error) int {
	var fe *flowrules.Error
	if errors.As(err, &fe) {
		return fe.Line
	}
	return 0
}

func setFilterDefault(c *Config, s string) error {
	a, ok := flowrules.ParseAction(s)
	if !ok {
		return errors.New("must be accept or reject")
	}
	c.FilterDefault = a
	return nil
}

// checkFilter checks what Load has already checked, for a Config built by
// hand.
func checkFilter(c *Config) error {
	if c.FilterDefault != flowrules.Accept && c.FilterDefault != flowrules.Reject {
		value := "" // unset
		if c.FilterDefault != 0 {
			value = c.FilterDefault.String()
		}
		return cliconf.Invalid("--filter-default", value, errors.New("must be accept or reject"))
	}
	if err := flowrules.Check(c.FilterRules); err != nil {
		return err
	}
	// A drops rule keeps the flows the drop hook reports: without that
	// hook it would keep nothing, silently.
	for i, r := range c.FilterRules {
		if r.Drops && !slices.Contains(c.Features, "drops") {
			return &flowrules.Error{Rule: i, Name: r.Name, Field: "drops", Value: "true",
				Reason: "needs the drops feature (--features with drops)"}
		}
	}
	return nil
}

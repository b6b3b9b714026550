package config

import (
	"os"

	"github.com/flowlens/flowlens/internal/shared/cliconf"
)

// spec is the agent's configuration for package cliconf, built from the
// options table.
var spec = &cliconf.Spec[Config]{
	Program:   "flowlens-agent",
	EnvPrefix: "FLOWLENS_AGENT_",
	Options:   options,
	Init:      initNodeName,
	FileRead:  func(c *Config, path string) { c.ConfigFile = path },
	Validate:  (*Config).Validate,
}

// ErrVersion is Load's error for --version: the caller prints the version
// (internal/shared/version) and exits 0.
var ErrVersion = cliconf.ErrVersion

// Load builds the configuration from, lowest precedence first: the defaults,
// the YAML file named by --config or FLOWLENS_AGENT_CONFIG, FLOWLENS_AGENT_<NAME>
// environment variables, and the flags in args (a flag given twice takes its
// last value). It then runs Validate.
//
// args excludes the program name. env looks up environment variables (pass
// os.Getenv; nil means an empty environment); taking it as a parameter keeps
// Load free of process state so tests can run in parallel. A variable set to
// "" counts as unset, since env cannot tell the two apart. The only other
// outside input is os.Hostname, the last fallback for --node-name.
//
// Load prints nothing. For -h or --help it returns flag.ErrHelp, and the
// caller should print Usage and exit 0; for --version, ErrVersion, and the
// caller should print the version and exit 0; on other errors it should print
// the error (and perhaps Usage) and exit non-zero.
func Load(args []string, env func(string) string) (*Config, error) {
	if features == nil {
		return nil, errNoFeatures
	}
	return spec.Load(args, env)
}

// initNodeName sets the --node-name default: $NODE_NAME, else the hostname.
func initNodeName(c *Config, env func(string) string) {
	c.NodeName = env("NODE_NAME")
	if c.NodeName == "" {
		// Validate reports an empty name; the hostname error adds nothing.
		c.NodeName, _ = os.Hostname()
	}
}

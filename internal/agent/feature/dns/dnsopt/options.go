// Package dnsopt is the dns feature's options, kernel-free: their rows of
// the agent's option table (flags, FLOWLENS_* variables, YAML keys), their
// defaults and their validation. It lives in the feature's folder and the
// feature (package dns) registers it; it is apart so that the operator,
// which writes the dns keys of an agent's configuration, can import the
// defaults without linking the kernel side (make check-layers allows
// exactly such internal/agent/feature/<name>/<name>opt packages).
package dnsopt

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
)

// Name is the feature's --features value.
const Name = "dns"

// The defaults, written once: the rows below, the kernel side (a Feature
// built without options) and the operator's renderer read them.
const (
	DefaultPort    = 53
	DefaultTimeout = 5 * time.Second
	// DefaultNamesCacheSize is how many addresses the agent keeps a DNS
	// name for (--dns-names-cache-size).
	DefaultNamesCacheSize = 16384
	// maxNamesCacheSize bounds --dns-names-cache-size (about 200 bytes an
	// entry: 200 MB at most).
	maxNamesCacheSize = 1 << 20
)

// The range --dns-timeout accepts.
const (
	minTimeout = 100 * time.Millisecond
	maxTimeout = time.Minute
)

// Options are the dns feature's settings, kept in the agent's configuration
// (config.FeatureOptions).
type Options struct {
	// Ports are the ports DNS messages are read on, UDP and TCP (1 to 4).
	Ports []uint16
	// Timeout is how long a query may go unanswered before its flow's
	// record says dns_timeout.
	Timeout time.Duration
	// NamesCacheSize caps the address -> name cache filled from the
	// answers (src_dns_name, dst_dns_name); 0: no names, answers are not
	// handed to the agent.
	NamesCacheSize int
}

// OptionsOf returns the dns options of a loaded configuration.
func OptionsOf(c *config.Config) *Options { return config.FeatureOptions[Options](c, Name) }

// Rows are the feature's rows of the agent's option table.
var Rows = []*cliconf.Option[config.Config]{
	{Name: "dns-ports", Arg: "list", Default: strconv.Itoa(DefaultPort),
		Usage:   "ports the dns feature reads DNS messages on, UDP and TCP (1 to 4 ports)",
		SetList: setPorts},
	{Name: "dns-timeout", Arg: "duration", Default: DefaultTimeout.String(),
		Usage: "how long a DNS query may go unanswered before its flow says dns_timeout (100ms to 1m)",
		Set:   cliconf.Duration(func(c *config.Config) *time.Duration { return &OptionsOf(c).Timeout })},
	{Name: "dns-names-cache-size", Arg: "n", Default: strconv.Itoa(DefaultNamesCacheSize),
		Usage: "addresses the agent keeps the DNS name of, from the A and AAAA records of the answers it sees, for src_dns_name and dst_dns_name (until their TTL; when full, the one expiring first goes, counted); 0: no names",
		Set: func(c *config.Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > maxNamesCacheSize {
				return fmt.Errorf("must be a number from 0 to %d", maxNamesCacheSize)
			}
			OptionsOf(c).NamesCacheSize = n
			return nil
		}},
}

func setPorts(c *config.Config, items []string) error {
	if len(items) < 1 || len(items) > 4 {
		return errors.New("must be 1 to 4 ports")
	}
	var ports []uint16
	for _, it := range items {
		n, err := strconv.ParseUint(it, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("port %q: must be a number from 1 to 65535", it)
		}
		ports = append(ports, uint16(n))
	}
	OptionsOf(c).Ports = ports
	return nil
}

// Validate checks the timeout's range once loaded, naming the flag whatever
// the value's source.
func Validate(c *config.Config) error {
	if d := OptionsOf(c).Timeout; d < minTimeout || d > maxTimeout {
		return cliconf.Invalid("--dns-timeout", d.String(), errors.New("must be from 100ms to 1m"))
	}
	return nil
}

package config

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowlens/flowlens/internal/cliconf"
	"github.com/flowlens/flowlens/internal/ifname"
)

// Validate checks every setting and returns all problems found, joined, each
// naming the flag at fault (even when the value came from the file or the
// environment, since the flag name is the one the usage text documents).
func (c *Config) Validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(checkNameList("--interfaces", c.Interfaces))
	add(checkNameList("--exclude-interfaces", c.ExcludeInterfaces))
	add(checkNetns(c.Netns, c.NetnsDir))
	if d := c.CacheActiveTimeout; d < 100*time.Millisecond || d > time.Hour {
		add(invalid("--cache-active-timeout", d.String(), errors.New("must be from 100ms to 1h")))
	}
	add(checkRange("--cache-max-flows", c.CacheMaxFlows, 1, 10_000_000))
	if c.Sampling < 1 {
		add(invalid("--sampling", strconv.FormatUint(uint64(c.Sampling), 10), errors.New("must be >= 1")))
	}
	add(checkFilter(c))
	if d := c.DNSTimeout; d < 100*time.Millisecond || d > time.Minute {
		add(invalid("--dns-timeout", d.String(), errors.New("must be from 100ms to 1m")))
	}
	add(checkExport(c.Export))
	add(checkTarget(c.Target, c.Export))
	add(checkRange("--grpc-batch-size", c.GRPCBatchSize, 1, 100_000))
	add(checkIPFIX(c))
	add(checkKafka(c))
	add(checkRange("--export-buffer", c.ExportBuffer, 0, 100_000))
	add(checkTLS(c))
	if c.MetricsAddress != "" {
		if err := splitHostPort(c.MetricsAddress); err != nil {
			add(invalid("--metrics-address", c.MetricsAddress, err))
		}
	}
	if c.NodeName == "" {
		add(invalid("--node-name", "", errors.New("must not be empty; set it or NODE_NAME")))
	}
	add(checkLevel(c))
	return errors.Join(errs...)
}

// checkNameList checks the /regex/ entries of an interface list.
func checkNameList(flagName string, entries []string) error {
	for _, e := range entries {
		if _, err := ifname.CompileEntry(e); err != nil {
			return invalid(flagName, e, err)
		}
	}
	return nil
}

func checkNetns(list []string, dir string) error {
	if len(list) == 0 {
		return invalid("--netns", "", errors.New(`must list "host", "all" or namespace names`))
	}
	var all, named bool
	for _, e := range list {
		switch {
		case e == "host":
		case e == "all":
			all = true
		case strings.Contains(e, "/") || e == "." || e == "..":
			// Names are joined to --netns-dir; a path would escape it.
			return invalid("--netns", e, errors.New("must be a namespace name under --netns-dir, not a path"))
		default:
			named = true
		}
	}
	if all && named {
		return invalid("--netns", strings.Join(list, ","), errors.New(`"all" cannot be combined with namespace names`))
	}
	if (all || named) && dir == "" {
		return invalid("--netns-dir", "", errors.New("must be set to watch named namespaces"))
	}
	return nil
}

func checkRange(flagName string, v, lo, hi int) error {
	if v < lo || v > hi {
		return invalid(flagName, strconv.Itoa(v), fmt.Errorf("must be from %d to %d", lo, hi))
	}
	return nil
}

const exporterNames = "stdout, grpc, ipfix, kafka"

func checkExport(list []string) error {
	if len(list) == 0 {
		return invalid("--export", "", errors.New("must list at least one of "+exporterNames))
	}
	seen := map[string]bool{}
	for _, e := range list {
		if e != "stdout" && e != "grpc" && e != "ipfix" && e != "kafka" {
			return invalid("--export", e, errors.New("unknown exporter: must be one of "+exporterNames))
		}
		if seen[e] {
			return invalid("--export", strings.Join(list, ","), fmt.Errorf("%q is listed twice", e))
		}
		seen[e] = true
	}
	return nil
}

func checkTarget(target string, export []string) error {
	if target == "" {
		for _, e := range export {
			if e == "grpc" {
				return errors.New("--target is required when --export includes grpc")
			}
		}
		return nil
	}
	if err := splitHostPort(target); err != nil {
		return invalid("--target", target, err)
	}
	_, port, _ := net.SplitHostPort(target)
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return invalid("--target", target, errors.New("port must be a number from 1 to 65535"))
	}
	return nil
}

// checkIPFIX checks the ipfix exporter's settings; the target is required
// only when the exporter is used, the others always (they have defaults).
func checkIPFIX(c *Config) error {
	var errs []error
	if c.IPFIXTarget == "" {
		if slices.Contains(c.Export, "ipfix") {
			errs = append(errs, errors.New("--ipfix-target is required when --export includes ipfix"))
		}
	} else if err := checkHostPort("--ipfix-target", c.IPFIXTarget); err != nil {
		errs = append(errs, err)
	}
	if c.IPFIXTransport != "udp" && c.IPFIXTransport != "tcp" {
		errs = append(errs, invalid("--ipfix-transport", c.IPFIXTransport, errors.New("must be udp or tcp")))
	}
	if d := c.IPFIXTemplateRefresh; d < time.Second || d > time.Hour {
		errs = append(errs, invalid("--ipfix-template-refresh", d.String(), errors.New("must be from 1s to 1h")))
	}
	return errors.Join(errs...)
}

// checkHostPort checks a host:port with a host and a numeric port.
func checkHostPort(flagName, addr string) error {
	if err := splitHostPort(addr); err != nil {
		return invalid(flagName, addr, err)
	}
	host, port, _ := net.SplitHostPort(addr)
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return invalid(flagName, addr, errors.New("port must be a number from 1 to 65535"))
	}
	if host == "" {
		return invalid(flagName, addr, errors.New("must name a host"))
	}
	return nil
}

// splitHostPort returns net.SplitHostPort's reason without the address,
// which the caller's message already shows.
func splitHostPort(addr string) error { return cliconf.SplitHostPort(addr) }

func checkTLS(c *Config) error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key must be given together")
	}
	return checkFiles([]struct{ flag, path string }{
		{"--tls-ca", c.TLSCA}, {"--tls-cert", c.TLSCert}, {"--tls-key", c.TLSKey},
	})
}

func checkLevel(c *Config) error { return cliconf.CheckLevel("--log-level", c.LogLevel) }

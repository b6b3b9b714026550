package config

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowlens/flowlens/internal/agent/ifname"
	"github.com/flowlens/flowlens/internal/agent/ipfixsize"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/httpserve"
	"github.com/flowlens/flowlens/pkg/flow"
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
		add(cliconf.Invalid("--cache-active-timeout", d.String(), errors.New("must be from 100ms to 1h")))
	}
	add(checkRange("--cache-max-flows", c.CacheMaxFlows, 1, 10_000_000))
	if c.Sampling < 1 {
		add(cliconf.Invalid("--sampling", strconv.FormatUint(uint64(c.Sampling), 10), errors.New("must be >= 1")))
	}
	add(checkFilter(c))
	for _, f := range features {
		if f.Validate != nil {
			add(f.Validate(c))
		}
	}
	add(checkExport(c.Export))
	if err := checkTarget(c.Target, c.Export); err != nil {
		add(err)
	} else {
		add(c.checkPlaintext())
	}
	add(checkRange("--grpc-batch-size", c.GRPCBatchSize, 1, 100_000))
	// A copied packet and its header fit a perf sample (at most 64 KiB).
	add(checkRange("--capture-max-snaplen", c.CaptureMaxSnaplen, 1, MaxCaptureSnaplen))
	add(checkIPFIX(c))
	add(checkOTLP(c))
	add(checkKafka(c))
	add(checkRange("--export-buffer", c.ExportBuffer, 0, 100_000))
	add(grpcTLS.Check(c))
	add(cliconf.CheckFile("--token-file", c.TokenFile))
	if c.MetricsAddress != "" {
		if err := cliconf.SplitHostPort(c.MetricsAddress); err != nil {
			add(cliconf.Invalid("--metrics-address", c.MetricsAddress, err))
		}
	}
	add(httpserve.CheckWebConfig("--web-config-file", c.WebConfigFile))
	if c.NodeName == "" {
		add(cliconf.Invalid("--node-name", "", errors.New("must not be empty; set it or NODE_NAME")))
	}
	if len(c.NodeName) > flow.MaxNodeName {
		// The collector refuses flows beyond the bound (flowpb.Bounds).
		add(cliconf.Invalid("--node-name", c.NodeName, fmt.Errorf("must be at most %d bytes, as Kubernetes node names are", flow.MaxNodeName)))
	}
	add(checkLevel(c))
	return errors.Join(errs...)
}

// checkNameList checks the /regex/ entries of an interface list.
func checkNameList(flagName string, entries []string) error {
	for _, e := range entries {
		if _, err := ifname.CompileEntry(e); err != nil {
			return cliconf.Invalid(flagName, e, err)
		}
	}
	return nil
}

func checkNetns(list []string, dir string) error {
	if len(list) == 0 {
		return cliconf.Invalid("--netns", "", errors.New(`must list "host", "all" or namespace names`))
	}
	var all, named bool
	for _, e := range list {
		switch {
		case e == "host":
		case e == "all":
			all = true
		case strings.Contains(e, "/") || e == "." || e == "..":
			// Names are joined to --netns-dir; a path would escape it.
			return cliconf.Invalid("--netns", e, errors.New("must be a namespace name under --netns-dir, not a path"))
		default:
			named = true
		}
	}
	if all && named {
		return cliconf.Invalid("--netns", strings.Join(list, ","), errors.New(`"all" cannot be combined with namespace names`))
	}
	if (all || named) && dir == "" {
		return cliconf.Invalid("--netns-dir", "", errors.New("must be set to watch named namespaces"))
	}
	return nil
}

func checkRange(flagName string, v, lo, hi int) error {
	if v < lo || v > hi {
		return cliconf.Invalid(flagName, strconv.Itoa(v), fmt.Errorf("must be from %d to %d", lo, hi))
	}
	return nil
}

const exporterNames = "stdout, grpc, ipfix, kafka, otlp"

func checkExport(list []string) error {
	if len(list) == 0 {
		return cliconf.Invalid("--export", "", errors.New("must list at least one of "+exporterNames))
	}
	seen := map[string]bool{}
	for _, e := range list {
		if e != "stdout" && e != "grpc" && e != "ipfix" && e != "kafka" && e != "otlp" {
			return cliconf.Invalid("--export", e, errors.New("unknown exporter: must be one of "+exporterNames))
		}
		if seen[e] {
			return cliconf.Invalid("--export", strings.Join(list, ","), fmt.Errorf("%q is listed twice", e))
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
	if err := cliconf.SplitHostPort(target); err != nil {
		return cliconf.Invalid("--target", target, err)
	}
	_, port, _ := net.SplitHostPort(target)
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return cliconf.Invalid("--target", target, errors.New("port must be a number from 1 to 65535"))
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
	} else if err := cliconf.CheckHostPort("--ipfix-target", c.IPFIXTarget); err != nil {
		errs = append(errs, err)
	}
	if c.IPFIXTransport != "udp" && c.IPFIXTransport != "tcp" {
		errs = append(errs, cliconf.Invalid("--ipfix-transport", c.IPFIXTransport, errors.New("must be udp or tcp")))
	}
	if d := c.IPFIXTemplateRefresh; d < time.Second || d > time.Hour {
		errs = append(errs, cliconf.Invalid("--ipfix-template-refresh", d.String(), errors.New("must be from 1s to 1h")))
	}
	if err := ipfixsize.Check(c.IPFIXMaxMessageSize, c.IPFIXTransport); err != nil {
		errs = append(errs, cliconf.Invalid("--ipfix-max-message-size", strconv.Itoa(c.IPFIXMaxMessageSize), err))
	}
	if c.IPFIXEnterpriseNumber == 0 {
		errs = append(errs, cliconf.Invalid("--ipfix-enterprise-number", "0", errors.New("must be an integer from 1 to 4294967295")))
	}
	return errors.Join(errs...)
}

// checkOTLP checks the otlp exporter's settings; the endpoint is required
// only when the exporter is used, the others always.
func checkOTLP(c *Config) error {
	var errs []error
	if c.OTLPEndpoint == "" {
		if slices.Contains(c.Export, "otlp") {
			errs = append(errs, errors.New("--otlp-endpoint is required when --export includes otlp"))
		}
	} else if err := cliconf.CheckHostPort("--otlp-endpoint", c.OTLPEndpoint); err != nil {
		errs = append(errs, err)
	}
	if c.OTLPProtocol != "grpc" && c.OTLPProtocol != "http" {
		errs = append(errs, cliconf.Invalid("--otlp-protocol", c.OTLPProtocol, errors.New("must be grpc or http")))
	}
	if c.OTLPCompression != "none" && c.OTLPCompression != "gzip" {
		errs = append(errs, cliconf.Invalid("--otlp-compression", c.OTLPCompression, errors.New("must be none or gzip")))
	}
	errs = append(errs, checkRange("--otlp-batch-flows", c.OTLPBatchFlows, 1, 100_000))
	errs = append(errs, otlpTLS.Check(c))
	return errors.Join(errs...)
}

// GRPCTLSOn reports whether the grpc exporter uses TLS: --tls, or any of
// its TLS files.
func (c *Config) GRPCTLSOn() bool {
	return c.TLS || c.TLSCA != "" || c.TLSCert != "" || c.TLSKey != ""
}

// checkPlaintext refuses a plaintext grpc exporter to a target off the
// machine, and a bearer token sent in plaintext, unless
// --insecure-plaintext says so.
func (c *Config) checkPlaintext() error {
	if !slices.Contains(c.Export, "grpc") || c.GRPCTLSOn() || c.InsecurePlaintext {
		return nil
	}
	var errs []error
	if c.Target != "" && !cliconf.Loopback(c.Target) {
		errs = append(errs, cliconf.Invalid("--target", c.Target, errors.New(
			"is not a loopback address: export over TLS (--tls, --tls-ca), or give --insecure-plaintext to send flows in plaintext that anyone on the path can read and forge")))
	}
	if c.TokenFile != "" {
		errs = append(errs, errors.New("--token-file needs --tls: the token would cross the network in plaintext (--insecure-plaintext allows it, for tests)"))
	}
	return errors.Join(errs...)
}

// OTLPTLSOn reports whether the otlp exporter uses TLS: --otlp-tls, or
// any of its TLS files.
func (c *Config) OTLPTLSOn() bool {
	return c.OTLPTLS || c.OTLPTLSCA != "" || c.OTLPTLSCert != "" || c.OTLPTLSKey != ""
}

func checkLevel(c *Config) error { return cliconf.CheckLevel("--log-level", c.LogLevel) }

// The exporters' TLS clients, groups written once in package cliconf.
var (
	grpcTLS = cliconf.ClientTLS[Config]{Peer: "grpc collector", CAUsage: " (default: the system's roots)",
		On:   func(c *Config) *bool { return &c.TLS },
		CA:   func(c *Config) *string { return &c.TLSCA },
		Cert: func(c *Config) *string { return &c.TLSCert },
		Key:  func(c *Config) *string { return &c.TLSKey }}
	otlpTLS = cliconf.ClientTLS[Config]{Prefix: "otlp-", Peer: "OTLP receiver", CAUsage: " (default: the system's roots)",
		On:   func(c *Config) *bool { return &c.OTLPTLS },
		CA:   func(c *Config) *string { return &c.OTLPTLSCA },
		Cert: func(c *Config) *string { return &c.OTLPTLSCert },
		Key:  func(c *Config) *string { return &c.OTLPTLSKey }}
)

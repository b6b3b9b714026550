package collector

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/flowquery"
	"github.com/flowlens/flowlens/internal/shared/textfmt"
)

// The parsers of the option table's values that are more than a string,
// a number or a duration.

func setOutput(c *Config, s string) error {
	switch s {
	case OutputJSON, OutputTable, OutputNone:
		c.Output = s
		return nil
	}
	return errors.New("must be json, table or none")
}

// printQuery is the query of --ip, --port and --proto, made when the first
// of them is set: they are criteria of one flow query (package flowquery),
// the one observe and the history use.
func printQuery(c *Config) *flowv1.FlowFilter {
	if c.Print == nil {
		c.Print = &flowv1.FlowFilter{}
	}
	return c.Print
}

func setIPs(c *Config, items []string) error {
	q := printQuery(c)
	q.Ip = nil
	for _, s := range items {
		// Checked here, in the words of a flag; Compile parses them again.
		if _, err := flowquery.ParsePrefixes([]string{s}); err != nil {
			return cliconf.ItemError(s, errors.New("must be an IP address or CIDR, such as 10.0.0.1 or 10.0.0.0/8"))
		}
		q.Ip = append(q.Ip, s)
	}
	return nil
}

func setPorts(c *Config, items []string) error {
	q := printQuery(c)
	q.Port = nil
	for _, s := range items {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return cliconf.ItemError(s, errors.New("must be a port number from 0 to 65535"))
		}
		q.Port = append(q.Port, uint32(p))
	}
	return nil
}

func setProtos(c *Config, items []string) error {
	q := printQuery(c)
	q.Protocol = nil
	for _, s := range items {
		n, err := textfmt.ParseProtocol(s)
		if err != nil {
			return cliconf.ItemError(s, err)
		}
		q.Protocol = append(q.Protocol, uint32(n))
	}
	return nil
}

// setMetrics takes metric names; "all" alone means every flow metric (nil),
// "none" adds none, so "none" or an empty list leaves only the health
// metrics.
func setMetrics(c *Config, items []string) error {
	if len(items) == 1 && items[0] == "all" {
		c.Metrics.Enabled = nil
		return nil
	}
	c.Metrics.Enabled = []string{}
	for _, m := range items {
		if m == "none" {
			continue
		}
		full := m
		if !strings.HasPrefix(full, enrich.Prefix) {
			full = enrich.Prefix + m
		}
		if !slices.Contains(enrich.FlowMetricNames, full) && !slices.Contains(enrich.HealthMetricNames, full) {
			var names []string
			for _, n := range enrich.FlowMetricNames {
				names = append(names, strings.TrimPrefix(n, enrich.Prefix))
			}
			return cliconf.ItemError(m, errors.New("unknown metric: must be all, none or some of "+strings.Join(names, ", ")))
		}
		c.Metrics.Enabled = append(c.Metrics.Enabled, m)
	}
	return nil
}

func setAuth(c *Config, s string) error {
	switch s {
	case AuthAuto, AuthKubernetes, AuthNone:
		c.Auth = s
		return nil
	}
	return errors.New("must be auto, kubernetes or none")
}

func setEnrich(c *Config, s string) error {
	if strings.EqualFold(s, "auto") {
		c.Enrichment.Enable = nil
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("must be true, false or auto")
	}
	c.Enrichment.Enable = &b
	return nil
}

// setSubnets checks each name=CIDR in words of our own, then builds the
// table (which also refuses a prefix labelled twice).
func setSubnets(c *Config, items []string) error {
	for _, s := range items {
		name, cidr, ok := strings.Cut(s, "=")
		name, cidr = strings.TrimSpace(name), strings.TrimSpace(cidr)
		if !ok || name == "" || cidr == "" {
			return cliconf.ItemError(s, errors.New("must be name=CIDR, such as corp=10.0.0.0/8"))
		}
		if _, err := netip.ParsePrefix(cidr); err != nil {
			return cliconf.ItemError(s, errors.New(strconv.Quote(cidr)+" is not a CIDR such as 10.0.0.0/8 or fd00::/8"))
		}
	}
	subnets, err := k8smeta.NewSubnets(items...)
	if err != nil {
		return err
	}
	c.Enrichment.Subnets = subnets
	return nil
}

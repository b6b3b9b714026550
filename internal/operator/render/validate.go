package render

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/flowrules"
)

// Validate checks what the CRD schema cannot: that interface patterns compile
// and that the flow filter rules pass the agent's checks (with the agent's own
// parsers, so both agree), and that the gRPC, IPFIX and OTLP targets and the
// Kafka brokers are hosts the agent can dial. It returns every problem found,
// joined, each naming the spec field at fault. The reconciler reports the
// error in the Degraded condition and leaves the running agents as they are.
func Validate(spec *v1alpha1.FlowCollectorSpec) error {
	var errs []error
	if _, err := config.NewInterfaceSelection(spec.Agent.Interfaces, nil); err != nil {
		errs = append(errs, fmt.Errorf("spec.agent.interfaces: %w", trimPrefix(err, "include ")))
	}
	if _, err := config.NewInterfaceSelection(nil, spec.Agent.ExcludeInterfaces); err != nil {
		errs = append(errs, fmt.Errorf("spec.agent.excludeInterfaces: %w", trimPrefix(err, "exclude ")))
	}
	if err := checkFilterRules(spec.Agent.FlowFilter); err != nil {
		errs = append(errs, err)
	} else if err := checkDropsRules(spec); err != nil {
		errs = append(errs, err)
	}
	for i, e := range spec.Exporters {
		if e.GRPC != nil {
			if err := checkHost(e.GRPC.TargetHost); err != nil {
				errs = append(errs, fmt.Errorf("spec.exporters[%d].grpc.targetHost %q: %w", i, e.GRPC.TargetHost, err))
			}
		}
		if e.IPFIX != nil {
			if err := checkHost(e.IPFIX.TargetHost); err != nil {
				errs = append(errs, fmt.Errorf("spec.exporters[%d].ipfix.targetHost %q: %w", i, e.IPFIX.TargetHost, err))
			}
		}
		if e.OTLP != nil {
			if err := checkHost(e.OTLP.TargetHost); err != nil {
				errs = append(errs, fmt.Errorf("spec.exporters[%d].otlp.targetHost %q: %w", i, e.OTLP.TargetHost, err))
			}
		}
		if e.Kafka != nil {
			for j, b := range e.Kafka.Brokers {
				if err := checkBroker(b); err != nil {
					errs = append(errs, fmt.Errorf("spec.exporters[%d].kafka.brokers[%d] %q: %w", i, j, b, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// checkFilterRules runs the flow filter rules, as the agent will read them,
// through the agent's parser and checks (internal/agent/flowrules). The schema makes
// the same checks but one: CEL cannot compile a rule's interface regex. This
// catches that, and any check the schema would miss, as Degraded rather than
// as agents that refuse to start. The error names the first bad rule's field
// by its spec path.
func checkFilterRules(f *v1alpha1.FlowFilter) error {
	if f == nil || len(f.Rules) == 0 {
		return nil
	}
	data, err := yaml.Marshal(agentFilterRules(f.Rules))
	if err != nil {
		return fmt.Errorf("spec.agent.flowFilter.rules: %w", err)
	}
	_, err = flowrules.Parse(data)
	var fe *flowrules.Error
	if !errors.As(err, &fe) {
		return err
	}
	path := "spec.agent.flowFilter.rules"
	if fe.Rule >= 0 {
		path += fmt.Sprintf("[%d]", fe.Rule)
	}
	if fe.Field != "" {
		path += "." + specField(fe.Field)
	}
	if fe.Value != "" {
		return fmt.Errorf("%s %q: %s", path, fe.Value, fe.Reason)
	}
	return fmt.Errorf("%s: %s", path, fe.Reason)
}

// checkDropsRules refuses a drops rule without the drops feature, as the
// agent does at start (a drops rule keeps the flows the drop hook reports).
func checkDropsRules(spec *v1alpha1.FlowCollectorSpec) error {
	a := &spec.Agent
	if a.FlowFilter == nil || slices.Contains(a.Features, v1alpha1.FeatureDrops) {
		return nil
	}
	for i, r := range a.FlowFilter.Rules {
		if r.Drops {
			return fmt.Errorf("spec.agent.flowFilter.rules[%d].drops \"true\": needs the drops feature in spec.agent.features", i)
		}
	}
	return nil
}

// specField is the FlowFilterRule field of an agent rule key.
func specField(key string) string {
	camel := map[string]string{
		"peer_cidr":         "peerCIDR",
		"source_ports":      "sourcePorts",
		"destination_ports": "destinationPorts",
		"icmp_type":         "icmpType",
		"icmp_code":         "icmpCode",
		"tcp_flags":         "tcpFlags",
	}
	if c, ok := camel[key]; ok {
		return c
	}
	return key
}

// checkHost accepts an IP address or a DNS name (RFC 1123 subdomain, which
// also allows a trailing dot for a fully qualified name).
func checkHost(h string) error {
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	switch {
	case strings.Contains(h, "://"):
		return errors.New("must be a host name or IP address, not a URL")
	case strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1:
		return errors.New("must not include a port: set targetPort")
	case strings.Contains(h, ":"):
		return errors.New("is not a valid IP address")
	}
	name := strings.TrimSuffix(h, ".")
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("is not a valid DNS name: %s", strings.Join(msgs, "; "))
	}
	return nil
}

// checkBroker accepts host:port, the host as checkHost does, the port from 1
// to 65535.
func checkBroker(b string) error {
	host, port, err := net.SplitHostPort(b)
	if err != nil {
		return errors.New("must be host:port, with an IPv6 address in brackets")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return errors.New("the port must be from 1 to 65535")
	}
	if strings.Contains(host, ":") {
		if _, err := netip.ParseAddr(host); err != nil {
			return errors.New("is not a valid IP address")
		}
		return nil
	}
	return checkHost(host)
}

// trimPrefix drops the "include "/"exclude " prefix InterfaceSelection
// puts before its message, which the field name replaces.
func trimPrefix(err error, prefix string) error {
	if s := err.Error(); strings.HasPrefix(s, prefix) {
		return errors.New(strings.TrimPrefix(s, prefix))
	}
	return err
}

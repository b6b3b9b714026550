package render

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/config"
)

// Validate checks what the CRD schema cannot: that interface patterns, of
// spec and of the flow filter rules, compile (with the agent's own parser, so
// both agree) and that the gRPC target is a host the agent can dial. It
// returns every problem found, joined, each naming the spec field at fault. The reconciler reports the error in the Degraded
// condition and leaves the running agents as they are.
func Validate(spec *v1alpha1.FlowCollectorSpec) error {
	var errs []error
	if _, err := config.NewNameFilter(spec.Interfaces, nil); err != nil {
		errs = append(errs, fmt.Errorf("spec.interfaces: %w", trimPrefix(err, "include ")))
	}
	if _, err := config.NewNameFilter(nil, spec.ExcludeInterfaces); err != nil {
		errs = append(errs, fmt.Errorf("spec.excludeInterfaces: %w", trimPrefix(err, "exclude ")))
	}
	if spec.FlowFilter != nil {
		for i, r := range spec.FlowFilter.Rules {
			if _, err := config.NewNameFilter(r.Interfaces, nil); err != nil {
				errs = append(errs, fmt.Errorf("spec.flowFilter.rules[%d].interfaces: %w", i, trimPrefix(err, "include ")))
			}
		}
	}
	for i, e := range spec.Exporters {
		if e.GRPC == nil {
			continue
		}
		if err := checkHost(e.GRPC.TargetHost); err != nil {
			errs = append(errs, fmt.Errorf("spec.exporters[%d].grpc.targetHost %q: %w", i, e.GRPC.TargetHost, err))
		}
	}
	return errors.Join(errs...)
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

// trimPrefix drops the "include "/"exclude " prefix NameFilter puts before
// its message, which the field name replaces.
func trimPrefix(err error, prefix string) error {
	if s := err.Error(); strings.HasPrefix(s, prefix) {
		return errors.New(strings.TrimPrefix(s, prefix))
	}
	return err
}

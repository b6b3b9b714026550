// Package conntrack stands in for github.com/mwitkow/go-conntrack (go.mod's
// replace): the dialer options prometheus/common/config calls, with no
// tracing and no metrics. flowlens links prometheus/common/config only
// through exporter-toolkit's web configuration (the metrics server's TLS),
// which never dials; the real package's init registers its dialer and
// listener metrics in Prometheus' default registry (flowlens serves its own
// registries) and imports golang.org/x/net/trace, whose init registers
// /debug/requests on http.DefaultServeMux (flowlens serves its own mux):
// that handler renders an html/template, and a reachable template execution
// makes the linker keep every exported method of every type converted to an
// interface. Without it (and gRPC's, with -tags=grpcnotrace) the agent's
// binary is ~4 MB smaller and ~2.3 MiB less of it resident
// (docs/benchmarks.md, "the agent's memory, third round").
package conntrack

import (
	"context"
	"net"
)

type dialerOpts struct {
	dial func(context.Context, string, string) (net.Conn, error)
}

type dialerOpt func(*dialerOpts)

// DialWithName is accepted and ignored (the name labelled metrics and traces).
func DialWithName(string) dialerOpt { return func(*dialerOpts) {} }

// DialWithTracing is accepted and ignored (there is no tracing).
func DialWithTracing() dialerOpt { return func(*dialerOpts) {} }

// DialWithoutMonitoring is accepted and ignored (there are no metrics).
func DialWithoutMonitoring() dialerOpt { return func(*dialerOpts) {} }

// DialWithDialer dials with d.
func DialWithDialer(d *net.Dialer) dialerOpt { return DialWithDialContextFunc(d.DialContext) }

// DialWithDialContextFunc dials with f.
func DialWithDialContextFunc(f func(context.Context, string, string) (net.Conn, error)) dialerOpt {
	return func(o *dialerOpts) { o.dial = f }
}

// NewDialContextFunc returns the dial function the options give, by default
// a zero net.Dialer's DialContext, as the real package's.
func NewDialContextFunc(opts ...dialerOpt) func(context.Context, string, string) (net.Conn, error) {
	o := &dialerOpts{dial: (&net.Dialer{}).DialContext}
	for _, f := range opts {
		f(o)
	}
	return o.dial
}

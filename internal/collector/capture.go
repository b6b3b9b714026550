package collector

import (
	"context"

	"github.com/flowlens/flowlens/internal/collector/capturerelay"
	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// startCapture serves packet capture (package capturerelay, issue #32) on
// the gRPC server: names resolve with the enrichment's source, the
// agents' identity and the callers' names come from the authorizer.
func (c *Collector) startCapture(resolver *k8smeta.Resolver) {
	// Agents' capture streams are bounded as their Export streams are:
	// --max-agents of them, one per agent identity.
	maxStreams := c.cfg.Limits.MaxStreams
	if maxStreams == 0 {
		maxStreams = receiver.DefaultMaxStreams
	}
	o := capturerelay.Options{Logger: c.log, MaxStreams: maxStreams,
		AgentNode: func(ctx context.Context) (string, bool) {
			s, ok := ctx.Value(senderKey{}).(*sender)
			if !ok {
				return "", false
			}
			return s.node, true
		},
		User: func(ctx context.Context) string {
			u, _ := ctx.Value(userKey{}).(string)
			return u
		}}
	if c.auth != nil {
		// An agent's token is reviewed again as on its Export streams.
		o.RecheckEvery = c.auth.every
		o.Recheck = func(ctx context.Context) error {
			s, ok := ctx.Value(senderKey{}).(*sender)
			if !ok {
				return nil
			}
			return c.auth.recheck(ctx, s)
		}
	}
	if resolver != nil {
		o.Resolve = resolver.Resolve
		if l, ok := resolver.Source.(k8smeta.Lister); ok {
			o.Lister = l
		}
	}
	c.capture = capturerelay.New(o)
	c.capture.Register(c.srv)
	c.metrics.Registry().MustRegister(c.capture.Collectors()...)
}

// userKey carries the user of a Capture call (--auth kubernetes), for the
// log line every capture gets.
type userKey struct{}

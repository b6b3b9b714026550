package main

import "github.com/flowlens/flowlens/internal/collector"

// collector is the configuration the option table filled, as the plain
// Config internal/collector builds from.
func (o *options) collector() collector.Config {
	var enable *bool
	if o.enrichSet {
		enable = &o.enrich
	}
	return collector.Config{
		Listen: o.listen, Output: o.output, Match: o.filter.match,
		TLSCert: o.tlsCert, TLSKey: o.tlsKey, TLSClientCA: o.tlsCA,
		Limits: o.limits, ShutdownGrace: o.grace,
		MetricsAddress: o.metricsAddr, WebConfigFile: o.webConfig, Metrics: o.metrics,
		Kafka:   o.kafka,
		History: collector.History{Size: o.history.size, MaxAge: o.history.maxAge},
		Enrichment: collector.Enrichment{Enable: enable, Kubeconfig: o.kubeconfig, SyncTimeout: o.syncTimeout,
			StaticFile: o.static, Subnets: o.subnets},
	}
}

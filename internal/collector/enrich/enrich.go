// Package enrich is what flowlens-collector does with the flows it
// receives: convert each to a flow.Record, resolve its source and
// destination addresses to Kubernetes context (k8smeta), derive Prometheus
// metrics of bounded cardinality (Metrics), and hand the enriched flows
// (internal/shared/enriched.Flow) to a sink: the history, the printer.
//
//	m, _ := enrich.NewMetrics(enrich.MetricsOptions{DecodeErrors: srv.Stats.Malformed.Load})
//	p := &enrich.Pipeline{Resolver: &k8smeta.Resolver{Source: cache}, Metrics: m, Sink: print}
//	srv, _ := receiver.New(p.Handle, receiver.Options{})
//	http.ListenAndServe(":9401", m.Handler(ready))
//
// The core's metrics are in metrics.go; each kernel feature's (names,
// registration, its part of observe) in metrics_NAME.go, called by name
// from metrics.go's groupgen regions (FeatureMetrics lists them).
// Every flow metric's series are bounded (series.go): deleted once no flow
// updated them for MetricsOptions.SeriesTTL, at most MaxSeries per metric.
// docs/metrics.md lists the metrics, their labels and their cardinality.
package enrich

import (
	"context"
	"net/netip"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// Sink receives each batch's flows after enrichment and metrics. It is
// called concurrently for different agent streams. It may keep the slice.
type Sink func(ctx context.Context, flows []enriched.Flow) error

// Pipeline processes the batches of a receiver.Server: its Handle is the
// server's Handler. Every field is optional.
type Pipeline struct {
	// Resolver resolves addresses (nil: no enrichment, no src_k8s/dst_k8s).
	// With a nil Resolver.Source it only applies subnet labels; with a
	// Source, addresses it does not hold count as enrichment misses.
	Resolver *k8smeta.Resolver
	// Metrics observes every flow (nil: none).
	Metrics *Metrics
	// Sink receives the flows (nil: none).
	Sink Sink
}

// Handle is a receiver.Handler.
func (p *Pipeline) Handle(ctx context.Context, b *receiver.Batch) error {
	if p.Metrics != nil {
		p.Metrics.received.Add(float64(len(b.Flows)))
	}
	// The records are converted in place, not into a slice of records
	// copied into the flows (half a megabyte more to allocate, zero, copy
	// and scan per batch of 1,000); their interfaces share one backing
	// array, as flowpb.ToRecords does: each record's slice is carved out of
	// it with the capacity ToRecord fills.
	n := 0
	for _, pf := range b.Flows {
		n += len(pf.Interfaces)
	}
	ifs := make([]flow.Interface, n)
	flows := make([]enriched.Flow, len(b.Flows))
	for i, pf := range b.Flows {
		f := &flows[i]
		k := len(pf.Interfaces)
		f.Interfaces, ifs = ifs[:0:k], ifs[k:]
		if err := flowpb.ToRecord(&f.Record, pf); err != nil {
			// The server validated the flows: conversion cannot fail. If it
			// does anyway, the batch is refused like a malformed one.
			if p.Metrics != nil {
				p.Metrics.convertErrors.Add(1)
			}
			return status.Errorf(codes.InvalidArgument, "collector: flows[%d]: %v", i, err)
		}
		f.NodeName = pf.NodeName
		f.AgentIP = flowpb.Addr(pf.AgentIp)
	}
	p.Enrich(flows)
	if p.Metrics != nil {
		p.Metrics.Observe(flows)
	}
	if p.Sink != nil {
		return p.Sink(ctx, flows)
	}
	return nil
}

// Enrich fills Src and Dst of flows (nothing without a Resolver), counting
// enrichment misses in Metrics, and XlatSrc and XlatDst of translated flows
// (their addresses are not counted as misses: a masquerading node's
// address, say, is expected to be one).
//
// Each address is resolved once per call: the flows of one agent's batch
// share their node's pods and those pods' peers, and a lookup in the
// informers' indexes (an address string, locks, a slice, the ReplicaSet by
// key) cost a fifth of the collector's CPU per flow (docs/benchmarks.md
// §24). The memo lives for one batch only, so it needs no invalidation: a
// batch reads the cluster as one lookup per flow would, within the
// microseconds the batch takes.
func (p *Pipeline) Enrich(flows []enriched.Flow) {
	r := p.Resolver
	if r == nil {
		return
	}
	memo := make(map[netip.Addr]resolved, min(len(flows), 256))
	resolve := func(a netip.Addr) (enriched.K8sContext, bool) {
		if v, ok := memo[a]; ok {
			return v.m, v.in
		}
		m, in := r.Resolve(a)
		memo[a] = resolved{m: m, in: in}
		return m, in
	}
	for i := range flows {
		f := &flows[i]
		var srcIn, dstIn bool
		f.Src, srcIn = resolve(f.SrcAddr)
		f.Dst, dstIn = resolve(f.DstAddr)
		f.Enriched = true
		if f.XlatSrcAddr.IsValid() {
			f.XlatSrc, _ = resolve(f.XlatSrcAddr)
		}
		if f.XlatDstAddr.IsValid() {
			f.XlatDst, _ = resolve(f.XlatDstAddr)
		}
		if r.Source != nil && p.Metrics != nil {
			if !srcIn {
				p.Metrics.missSrc.Inc()
			}
			if !dstIn {
				p.Metrics.missDst.Inc()
			}
		}
	}
}

// resolved is an address's context and whether the cluster holds it, kept
// for the rest of one batch (Enrich).
type resolved struct {
	m  enriched.K8sContext
	in bool
}

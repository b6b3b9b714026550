// Package enrich is what flowlens-collector does with the flows it
// receives: convert each to a flow.Record, resolve its source and
// destination addresses to Kubernetes context (k8smeta), derive Prometheus
// metrics of bounded cardinality (Metrics), and hand the enriched flows to
// a sink (the command prints them as JSON lines or a table).
//
//	m, _ := enrich.NewMetrics(pipeline.MetricsOptions{DecodeErrors: srv.Stats.Malformed.Load})
//	p := &enrich.Pipeline{Resolver: &k8smeta.Resolver{Source: cache}, Metrics: m, Sink: print}
//	srv, _ := receiver.New(p.Handle, receiver.Options{})
//	http.ListenAndServe(":9401", m.Handler(ready))
//
// docs/metrics.md lists the metrics, their labels and their cardinality.
package enrich

import (
	"context"
	"net/netip"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// Flow is one received flow: the agent's record, the agent's identity, and
// when enrichment is on, the Kubernetes context of both ends.
type Flow struct {
	flow.Record
	NodeName string     // the agent's node
	AgentIP  netip.Addr // the agent's address (zero: unknown)
	// Enriched is set when the pipeline has a Resolver: Src and Dst are
	// then filled (Kind external for addresses outside the cluster).
	Enriched bool
	Src, Dst k8smeta.Meta
	// XlatSrc and XlatDst are the context of the translated addresses
	// (Record.XlatSrcAddr, XlatDstAddr: feature xlat), filled like Src and
	// Dst for an enriched flow whose address of that side is set: for a
	// Service's virtual IP translated to a backend, XlatDst is the backend
	// pod. Zero otherwise.
	XlatSrc, XlatDst k8smeta.Meta
}

// AppendJSON appends f as one JSON object: the agent's (flow.Record's
// AppendJSON, same fields and order), then node_name and agent_ip, then,
// for an enriched flow, src_k8s and dst_k8s (k8smeta.Meta.AppendJSON: kind,
// namespace, name, workload, workload_kind, node, subnet, empty ones left
// out), and for an enriched translated flow (feature xlat) xlat_src_k8s and
// xlat_dst_k8s, each when that translated address is set.
func (f *Flow) AppendJSON(b []byte) []byte {
	b = f.Record.AppendJSON(b)
	b = b[:len(b)-1] // reopen the object
	b = append(b, `,"node_name":`...)
	b = strconv.AppendQuote(b, f.NodeName)
	b = append(b, `,"agent_ip":"`...)
	if f.AgentIP.IsValid() {
		b = f.AgentIP.AppendTo(b)
	}
	b = append(b, '"')
	if f.Enriched {
		b = append(b, `,"src_k8s":`...)
		b = f.Src.AppendJSON(b)
		b = append(b, `,"dst_k8s":`...)
		b = f.Dst.AppendJSON(b)
		if f.XlatSrcAddr.IsValid() {
			b = append(b, `,"xlat_src_k8s":`...)
			b = f.XlatSrc.AppendJSON(b)
		}
		if f.XlatDstAddr.IsValid() {
			b = append(b, `,"xlat_dst_k8s":`...)
			b = f.XlatDst.AppendJSON(b)
		}
	}
	return append(b, '}')
}

// Sink receives each batch's flows after enrichment and metrics. It is
// called concurrently for different agent streams. It may keep the slice.
type Sink func(ctx context.Context, flows []Flow) error

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
	recs, err := flowpb.ToRecords(nil, b.Flows)
	if err != nil {
		// The server validated the flows: conversion cannot fail. If it
		// does anyway, the batch is refused like a malformed one.
		if p.Metrics != nil {
			p.Metrics.convertErrors.Add(1)
		}
		return status.Errorf(codes.InvalidArgument, "collector: %v", err)
	}
	flows := make([]Flow, len(recs))
	for i := range recs {
		f := &flows[i]
		f.Record = recs[i]
		f.NodeName = b.Flows[i].NodeName
		f.AgentIP = flowpb.Addr(b.Flows[i].AgentIp)
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
func (p *Pipeline) Enrich(flows []Flow) {
	r := p.Resolver
	if r == nil {
		return
	}
	for i := range flows {
		f := &flows[i]
		var srcIn, dstIn bool
		f.Src, srcIn = r.Resolve(f.SrcAddr)
		f.Dst, dstIn = r.Resolve(f.DstAddr)
		f.Enriched = true
		if f.XlatSrcAddr.IsValid() {
			f.XlatSrc, _ = r.Resolve(f.XlatSrcAddr)
		}
		if f.XlatDstAddr.IsValid() {
			f.XlatDst, _ = r.Resolve(f.XlatDstAddr)
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

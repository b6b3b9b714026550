package collector

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/flowlens/flowlens/internal/collector/k8smeta"
)

// ErrServe is returned by Run when the gRPC server stopped by itself.
var ErrServe = errors.New("server stopped")

// Run syncs the Kubernetes caches (up to Enrichment.SyncTimeout), serves
// agents and consumes Kafka (and expires the metrics' stale series) until
// ctx ends or the server fails, then shuts down. It returns nil after a clean stop.
func (c *Collector) Run(ctx context.Context) error {
	if c.cache != nil {
		c.cache.Start()
		c.syncCaches(ctx)
	}
	cfg := &c.cfg
	address := "none"
	if c.lis != nil {
		address = c.lis.Addr().String()
	}
	c.log.Info("receiving flows", "address", address, "tls", cfg.TLSCert != "", "mtls", cfg.TLSClientCA != "",
		"output", cfg.Output, "metrics", cfg.MetricsAddress, "history", cfg.History.Size, "enrichment", c.source,
		"subnets", cfg.Enrichment.Subnets.String())
	// Series of workloads, pods and nodes gone expire (--metrics-series-ttl).
	expiry, stopExpiry := context.WithCancel(ctx)
	defer stopExpiry()
	go c.metrics.RunExpiry(expiry)
	if c.lis == nil && cfg.Listen == "" {
		c.log.Info(`serving no gRPC (--listen ""): neither Export nor GetFlows`)
	}
	served := make(chan error, 1)
	if c.lis != nil {
		go func() { served <- c.srv.Serve(c.lis) }()
	}
	if c.consumer != nil {
		k := &cfg.Kafka
		c.log.Info("consuming flows from Kafka", "brokers", strings.Join(k.Brokers, ","), "topic", k.Topic, "group", k.Group)
		c.runConsumer(context.Background())
	}
	close(c.serving)

	var err error
	select {
	case <-ctx.Done():
	case serr := <-served:
		err = fmt.Errorf("%w: %w", ErrServe, serr)
	}
	if serr := c.shutdown(context.Background()); serr != nil {
		err = errors.Join(err, serr)
	}
	return err
}

func (c *Collector) syncCaches(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, c.cfg.Enrichment.SyncTimeout)
	synced := c.cache.WaitForSync(sctx)
	cancel()
	switch {
	case ctx.Err() != nil:
	case synced:
		c.log.Info("Kubernetes caches synced", "resources", strings.Join(k8smeta.Resources, ","))
	default:
		c.log.Warn("Kubernetes caches not synced: receiving flows anyway, enriched with what is cached (see flowlens_collector_informer_synced)",
			"after", c.cfg.Enrichment.SyncTimeout, "synced", fmt.Sprint(c.cache.Synced()))
	}
}

// runConsumer starts the Kafka consumer until stopConsuming. Not under
// Run's ctx: the consumer stops in shutdown's order, after the history.
func (c *Collector) runConsumer(ctx context.Context) {
	ctx, c.stopConsuming = context.WithCancel(ctx)
	go func() { c.consumer.Run(ctx); close(c.consumed) }()
}

// shutdown is the one way out, from New's failures and from Run, over
// whatever was built, in order: the history's follow streams (a graceful
// stop would wait for them), the Kafka consumer (commits what it handled,
// leaves its group), the gRPC server (the batches in hand, within
// ShutdownGrace), the printer's last bytes, the metrics server, the
// caches, the listener. It returns the error that makes the exit fail:
// output that could not be written.
func (c *Collector) shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ShutdownGrace)
	defer cancel()
	if c.hist != nil {
		c.hist.Close()
	}
	if c.consumer != nil {
		if c.stopConsuming == nil {
			// Built but never run: a run on an ended context only closes
			// its client.
			done, cancelNow := context.WithCancel(context.Background())
			cancelNow()
			c.runConsumer(done)
		}
		c.stopConsuming()
		select {
		case <-c.consumed:
		case <-ctx.Done():
			c.log.Warn("shutdown: the Kafka consumer did not stop in time")
		}
	}
	var err error
	if c.srv != nil {
		if serr := c.srv.Shutdown(ctx); serr != nil {
			c.log.Warn("shutdown: some batches were not handled", "error", serr)
		}
	}
	printed := uint64(0)
	if c.printer != nil {
		if perr := c.printer.flush(); perr != nil {
			err = fmt.Errorf("writing output: %w", perr)
		}
		printed = c.printer.printed.Load()
	}
	if c.ui != nil {
		c.ui.shutdown(ctx, c.log)
	}
	if c.ms != nil {
		if merr := c.ms.Shutdown(ctx); merr != nil {
			c.log.Warn("metrics server shutdown", "error", merr)
		}
	}
	if c.cache != nil {
		c.cache.Stop()
	}
	if c.lis != nil {
		c.lis.Close() // already closed by a served server's stop; not when New failed
	}
	c.logStats(printed)
	return err
}

// logStats logs the receivers' totals once they stopped, if they ran.
func (c *Collector) logStats(printed uint64) {
	select {
	case <-c.serving:
	default:
		return // New failed: nothing was received
	}
	st := &c.srv.Stats
	c.log.Info("stopped", "streams", st.StreamsTotal.Load(), "batches", st.Batches.Load(), "flows", st.Flows.Load(),
		"printed", printed, "rejected", st.Rejected.Load())
	if c.consumer != nil {
		cs := &c.consumer.Stats
		c.log.Info("stopped consuming", "records", cs.Records.Load(), "flows", cs.Flows.Load(), "malformed", cs.Malformed.Load(),
			"handler_errors", cs.HandlerErrors.Load(), "commit_errors", cs.CommitErrors.Load())
	}
}

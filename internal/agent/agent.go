// Package agent wires the node agent's stages together: interface watcher →
// datapath attach/detach, datapath maps → evictor → exporter queues. It owns
// their lifetimes: Run returns only after every program is detached, the
// flows left in the kernel are exported and everything is closed.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowlens/flowlens/internal/config"
	"github.com/flowlens/flowlens/internal/datapath"
	"github.com/flowlens/flowlens/internal/evictor"
	"github.com/flowlens/flowlens/internal/exporter"
	grpcexp "github.com/flowlens/flowlens/internal/exporter/grpc"
	"github.com/flowlens/flowlens/internal/exporter/stdout"
	"github.com/flowlens/flowlens/internal/ifaces"
	"github.com/flowlens/flowlens/internal/metrics"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Options are the parts of the environment an Agent writes to, so tests and
// embedders can redirect them.
type Options struct {
	Stdout io.Writer    // where the stdout exporter writes
	Logger *slog.Logger // nil: slog.Default()
	// ForceLegacyTC attaches with clsact + cls_bpf even where tcx exists.
	ForceLegacyTC bool
	// SkipHookPrograms makes the enrichment hooks skip these programs and
	// use their fallbacks (tests).
	SkipHookPrograms []string
	// ExtraExporters are added to the configured ones (tests, embedders).
	ExtraExporters []exporter.Exporter
}

// Agent is one node agent.
type Agent struct {
	cfg  *config.Config
	opts Options
	log  *slog.Logger

	DP       *datapath.Datapath
	Evictor  *evictor.Evictor
	Queues   []*exporter.Queue
	Metrics  *metrics.Metrics
	resolver *evictor.Resolver
	grpc     *grpcexp.Exporter
	bpfStats io.Closer // BPF_ENABLE_STATS for the agent's lifetime

	ready       chan struct{}
	metricsAddr atomic.Pointer[string]
}

// New loads the datapath and builds the exporters; Run starts the agent.
// On error nothing is left loaded.
func New(cfg *config.Config, opts Options) (*Agent, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	a := &Agent{cfg: cfg, opts: opts, log: opts.Logger, resolver: evictor.NewResolver(), ready: make(chan struct{})}
	// Kernel-side cost of our own programs: run time statistics on for the
	// agent's lifetime (not a global sysctl left behind), unless turned off:
	// they cost every BPF program on the node two clock reads per run.
	if cfg.BPFStats {
		if st, err := metrics.EnableBPFStats(); err != nil {
			a.log.Warn("BPF program run time statistics unavailable", "error", err)
		} else {
			a.bpfStats = st
		}
	}
	hooks := featureHooks(cfg.Features)
	dp, err := datapath.Load(datapath.Config{
		MaxFlows:         uint32(cfg.CacheMaxFlows),
		Sampling:         cfg.Sampling,
		ForceLegacyTC:    opts.ForceLegacyTC,
		Enrichment:       len(hooks) > 0,
		SkipHookPrograms: opts.SkipHookPrograms,
		Logger:           a.log,
	})
	if err != nil {
		a.closeStats()
		return nil, fmt.Errorf("load datapath: %w", err)
	}
	a.DP = dp
	enrichment := false
	for _, st := range dp.StartHooks(hooks) {
		if st.Running {
			enrichment = true
			a.log.Info("enrichment hook running", "hook", st.Name, "program", st.Program)
		} else {
			a.log.Warn("enrichment hook unavailable on this kernel; the others run", "hook", st.Name, "error", st.Err)
		}
	}
	var names evictor.Names
	if enrichment {
		n, err := datapath.LoadNames()
		if err != nil {
			a.log.Warn("drop reasons and TCP states will be numbers", "error", err)
		} else {
			names = n
		}
	}
	exps, err := a.exporters()
	if err != nil {
		dp.Close()
		a.closeStats()
		return nil, err
	}
	for _, e := range exps {
		a.Queues = append(a.Queues, exporter.NewQueue(e, cfg.ExportQueueBatches(), a.log))
	}
	ev, err := evictor.NewEvictor(evictor.EvictorConfig{
		Maps:       dp.Maps,
		MaxFlows:   uint32(cfg.CacheMaxFlows),
		Period:     cfg.CacheActiveTimeout,
		Sampling:   cfg.Sampling,
		BatchSize:  cfg.GRPCBatchSize,
		Resolver:   a.resolver,
		Sink:       a.push,
		Counters:   dp.ReadCounters,
		Enrichment: enrichment,
		Names:      names,
		Logger:     a.log,
	})
	if err != nil {
		dp.Close()
		a.closeStats()
		return nil, err
	}
	a.Evictor = ev
	if err := a.newMetrics(); err != nil {
		dp.Close()
		a.closeStats()
		return nil, err
	}
	return a, nil
}

func (a *Agent) newMetrics() error {
	exps := metrics.Queues(a.Queues)
	for i := range exps {
		if a.grpc != nil && exps[i].Name == a.grpc.Name() {
			exps[i].Connected, exps[i].Refused = a.grpc.Connected, a.grpc.Stats.Refused.Load
		}
	}
	bpfStats := a.bpfStats != nil
	m, err := metrics.New(metrics.Sources{
		Evictor:         &a.Evictor.Stats,
		Counters:        a.DP.ReadCounters,
		FlowMapCapacity: uint64(a.cfg.CacheMaxFlows),
		FlowMapEntries:  a.Evictor.ActiveFlows,
		Exporters:       exps,
		Attached:        a.DP.Attached,
		Hooks:           metrics.DatapathHooks(a.DP),
		Programs:        metrics.DatapathPrograms(a.DP),
		Maps:            metrics.DatapathMaps(a.DP.Maps),
		BPFStatsEnabled: func() bool { return bpfStats },
		EnrichmentLost:  a.DP.ReadEnrichmentLost,
	}, metrics.Options{Ready: metrics.ReadyWhenClosed(a.ready), Logger: a.log})
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	a.Evictor.OnEviction = m.ObserveEviction
	a.Metrics = m
	return nil
}

func (a *Agent) closeStats() {
	if a.bpfStats != nil {
		a.bpfStats.Close()
		a.bpfStats = nil
	}
}

func (a *Agent) exporters() ([]exporter.Exporter, error) {
	var out []exporter.Exporter
	for _, name := range a.cfg.Export {
		switch name {
		case "stdout":
			out = append(out, stdout.New(a.opts.Stdout))
		case "grpc":
			g, err := grpcexp.New(grpcexp.Config{Target: a.cfg.Target, TLSCA: a.cfg.TLSCA,
				TLSCert: a.cfg.TLSCert, TLSKey: a.cfg.TLSKey, NodeName: a.cfg.NodeName, Logger: a.log})
			if err != nil {
				return nil, fmt.Errorf("grpc exporter: %w", err)
			}
			a.grpc = g
			out = append(out, g)
		default:
			return nil, fmt.Errorf("exporter %q is not available in this build", name)
		}
	}
	return append(out, a.opts.ExtraExporters...), nil
}

// push is the evictor's Sink: every exporter queue gets the batch (one
// reference each) and may make the evictor wait for room until until.
func (a *Agent) push(b *flow.Batch, until time.Time) {
	if len(a.Queues) == 0 {
		b.Release()
		return
	}
	b.Retain(len(a.Queues) - 1)
	for _, q := range a.Queues {
		q.Push(b, until)
	}
}

// MetricsAddr is the address the metrics server listens on ("" if none).
func (a *Agent) MetricsAddr() string {
	if p := a.metricsAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// Ready is closed once the initial interfaces are attached.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Run runs the agent until ctx is done, then detaches, flushes the flows
// left in the kernel to the exporters and closes everything.
func (a *Agent) Run(ctx context.Context) error {
	defer a.closeStats()
	filter, err := config.NewNameFilter(a.cfg.Interfaces, a.cfg.ExcludeInterfaces)
	if err != nil {
		a.DP.Close()
		return err
	}
	if a.cfg.MetricsAddress != "" {
		srv, err := a.Metrics.Listen(a.cfg.MetricsAddress)
		if err != nil {
			a.DP.Close()
			return fmt.Errorf("metrics: %w", err)
		}
		addr := srv.Addr().String()
		a.metricsAddr.Store(&addr)
		a.log.Info("serving metrics", "address", addr, "paths", "/metrics /healthz /readyz")
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		}()
	}
	w := ifaces.New(ifaces.Options{Allowed: filter.Allowed, Netns: watchedNetns(a.cfg.Netns), NetnsDir: a.cfg.NetnsDir, Logger: a.log})

	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for _, q := range a.Queues {
		wg.Add(1)
		go func() { defer wg.Done(); q.Run(runCtx) }()
	}

	events := make(chan ifaces.Event, 64)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchErr := make(chan error, 1)
	go func() { watchErr <- w.Run(watchCtx, events); close(events) }()

	evCtx, stopEv := context.WithCancel(ctx)
	evDone := make(chan error, 1)
	go func() { evDone <- a.Evictor.Run(evCtx) }()

	readyTimer := time.NewTimer(500 * time.Millisecond) // initial listing settles quickly
	defer readyTimer.Stop()
	var runErr error
loop:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				break loop
			}
			a.handle(ev)
		case <-readyTimer.C:
			close(a.ready)
		}
	}
	if err := <-watchErr; err != nil && !errors.Is(err, context.Canceled) {
		runErr = fmt.Errorf("interface watcher: %w", err)
	}
	stopEv()
	<-evDone

	// Shutdown: detach first so no packet is counted after the final read.
	a.DP.StopHooks()
	if err := a.DP.DetachAll(); err != nil {
		a.log.Error("detach", "error", err)
		runErr = errors.Join(runErr, err)
	}
	if err := a.Evictor.Shutdown(); err != nil {
		a.log.Error("final eviction", "error", err)
		runErr = errors.Join(runErr, err)
	}
	flushCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range a.Queues {
		if err := q.Close(flushCtx); err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("close exporter %s: %w", q.Name(), err))
		}
	}
	stop()
	wg.Wait()
	if err := a.DP.Close(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	return runErr
}

func (a *Agent) handle(ev ifaces.Event) {
	it := ev.Iface
	key := evictor.IfaceKey{Netns: it.NetnsCookie, Ifindex: uint32(it.Index)}
	switch ev.Type {
	case ifaces.Added:
		a.resolver.Add(key, it.Name, it.Netns)
		if err := a.DP.Attach(it); err != nil {
			a.log.Warn("cannot attach; interface not observed", "interface", it.Name, "netns", it.Netns, "error", err)
			return
		}
		a.log.Debug("attached", "interface", it.Name, "netns", it.Netns, "ifindex", it.Index)
	case ifaces.Removed:
		a.resolver.Remove(key)
		if err := a.DP.Detach(it); err != nil {
			a.log.Warn("detach", "interface", it.Name, "netns", it.Netns, "error", err)
		}
	}
}

// watchedNetns maps --netns to the watcher's selection: "all" means the
// host namespace as well as every named one.
func watchedNetns(list []string) []string {
	out := append([]string(nil), list...)
	hasAll, hasHost := false, false
	for _, n := range list {
		hasAll = hasAll || n == ifaces.All
		hasHost = hasHost || n == ifaces.Host
	}
	if hasAll && !hasHost {
		out = append(out, ifaces.Host)
	}
	return out
}

// featureHooks maps --features to the datapath's enrichment hooks.
func featureHooks(f config.Features) []string {
	var hooks []string
	if f.Drops {
		hooks = append(hooks, datapath.HookDrops)
	}
	if f.RTT {
		hooks = append(hooks, datapath.HookRTT)
	}
	if f.Retransmits {
		hooks = append(hooks, datapath.HookRetransmits)
	}
	return hooks
}

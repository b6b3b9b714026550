package metrics_test

import (
	"context"
	"log/slog"
	"time"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/agent/metrics"
)

// How the agent wires the grpc exporter and the metrics (compiled, not run:
// it needs a kernel). cfg stands for the agent's config.Config.
func Example_agentWiring() {
	log := slog.Default()
	cfg := struct {
		Target, TLSCA, TLSCert, TLSKey, NodeName, MetricsAddress string
		CacheMaxFlows, GRPCBatchSize, ExportBuffer               int
	}{Target: "collector:9990", NodeName: "node-1", MetricsAddress: ":9400", CacheMaxFlows: 100000, GRPCBatchSize: 1000, ExportBuffer: 64}

	// Kernel program statistics for the agent's lifetime.
	stats, err := datapath.EnableBPFStats()
	if err != nil {
		log.Warn("BPF program run time statistics unavailable", "error", err)
	}

	dp, err := datapath.Load(datapath.Config{MaxFlows: uint32(cfg.CacheMaxFlows)})
	if err != nil {
		return
	}
	defer dp.Close()

	// --export grpc
	g, err := grpcexp.New(grpcexp.Config{
		Target: cfg.Target, TLSCA: cfg.TLSCA, TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey,
		NodeName: cfg.NodeName, Logger: log, // AgentIP: learned from the connection
	})
	if err != nil {
		return
	}
	queues := exporter.Fanout{exporter.NewQueue(g, cfg.ExportBuffer, log)}
	gens, err := datapath.NewGenerations(&dp.Maps, log)
	if err != nil {
		return
	}
	evStats := &evictor.Stats{} // the evictor counts here, the metrics read here

	// Each stage brings its own collectors: the datapath's counters,
	// programs and maps, the evictor's counts and durations, the exporters'
	// queue and delivery counts.
	dpMetrics := datapath.NewMetrics(metrics.Namespace, datapath.MetricSources{
		Counters:        dp.ReadCounters,
		FlowMapCapacity: uint64(cfg.CacheMaxFlows),
		FlowMapEntries:  gens.Entries,
		Attached:        dp.Attached,
		Hooks:           datapath.MetricHooks(dp),
		Programs:        datapath.MetricPrograms(dp),
		Maps:            datapath.MetricMaps(&dp.Maps),
		BPFStatsEnabled: func() bool { return stats != nil },
	}, log)
	evMetrics := evictor.NewMetrics(metrics.Namespace, evStats)
	cs := append(dpMetrics.Collectors(), evMetrics.Collectors()...)
	cs = append(cs, exporter.NewCollector(metrics.Namespace, queues))
	ready := make(chan struct{}) // the agent's a.ready
	m, err := metrics.New(metrics.Options{Ready: metrics.ReadyWhenClosed(ready), Logger: log}, cs...)
	if err != nil {
		return
	}
	ev, err := evictor.New(evictor.Config{Generations: gens, Clock: dp.Clock, Overflow: dp.Maps.Overflow,
		MaxFlows: uint32(cfg.CacheMaxFlows), Period: 5 * time.Second, BatchSize: cfg.GRPCBatchSize,
		Sink: queues, Observer: evMetrics, Stats: evStats, Logger: log})
	if err != nil {
		return
	}
	_ = ev // ... ev.Run(ctx) in a goroutine

	if cfg.MetricsAddress != "" {
		srv, err := m.Listen(cfg.MetricsAddress, "") // or a --web-config-file // fails now if the address is busy
		if err != nil {
			return
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		}()
	}
	// ... run; at the very end, after dp.Close():
	if stats != nil {
		stats.Close()
	}
}

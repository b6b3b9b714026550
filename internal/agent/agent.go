// Package agent is the node agent's pipeline, readable in this one file.
// New builds it, kernel side first: the datapath (maps, TC programs), the
// enabled features' hooks, the exporters behind their bounded queues, the
// metrics, and the evictor that moves flows from the kernel to the queues.
// Run runs it (the interface watcher attaches the datapath to interfaces as
// they come and go; the evictor evicts every period) and shuts it down in
// order: Run returns only after every program is detached, the flows left
// in the kernel are exported and everything is closed.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/capture"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/agent/exporter/ipfix"
	kafkaexp "github.com/flowlens/flowlens/internal/agent/exporter/kafka"
	"github.com/flowlens/flowlens/internal/agent/exporter/otlp"
	"github.com/flowlens/flowlens/internal/agent/exporter/stdout"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/internal/agent/feature/registry"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	"github.com/flowlens/flowlens/internal/agent/metrics"
	"github.com/flowlens/flowlens/internal/shared/version"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
)

// Options are the parts of the environment an Agent writes to, so tests and
// embedders can redirect them.
type Options struct {
	Stdout io.Writer    // where the stdout exporter writes
	Logger *slog.Logger // nil: slog.Default()
	// ForceLegacyTC attaches with clsact + cls_bpf even where tcx exists.
	ForceLegacyTC bool
	// ForcePerNamespacePrograms loads one TC program set per network
	// namespace (the fallback for kernels where the programs cannot read
	// the device's namespace) even where one shared set works.
	ForcePerNamespacePrograms bool
	// SkipHookPrograms makes the enrichment hooks skip these programs and
	// use their fallbacks (tests).
	SkipHookPrograms []string
	// ExtraExporters are added to the configured ones (tests, embedders).
	ExtraExporters []exporter.Exporter
	// MemoryLimit, when > 0, is the memory limit in bytes the bounds are
	// derived from, instead of the cgroup's (tests, embedders).
	MemoryLimit int64
	// UnmapBinaryPages has New unmap the binary's read-only pages once the
	// programs are loaded (UnmapBinaryPages): the agent's command sets it;
	// the binary is the process's, not an embedder's or a test's.
	UnmapBinaryPages bool
}

// Agent is one node agent.
type Agent struct {
	cfg  *config.Config
	opts Options
	log  *slog.Logger

	DP      *datapath.Datapath
	Evictor *evictor.Evictor
	// Memory is the agent's memory budget (its cgroup's limit) and the
	// bounds derived from it; the caller sets the Go runtime's limit from
	// it (SetGoMemoryLimit), a process-wide setting.
	Memory  MemoryBudget
	Queues  exporter.Fanout
	Metrics *metrics.Metrics
	// evictorMetrics times the evictions (the evictor's Observer).
	evictorMetrics *evictor.Metrics
	resolver       *evictor.Resolver
	kafka          *kafkaexp.Exporter // for KafkaStats
	// Capture is packet capture's engine (nil with --capture=false); its
	// requests come on the gRPC exporter's connection (capture_wiring.go).
	Capture  *capture.Capturer
	grpc     *grpcexp.Exporter // nil without the grpc exporter
	bpfStats io.Closer         // BPF_ENABLE_STATS for the agent's lifetime

	ready       chan struct{}
	metricsAddr atomic.Pointer[string]
	watched     *watched // what the interface log lines say (Run's loop only)
	zones       *zoner   // the namespaces' zones (zones.go; Run's loop only)
}

// New builds the pipeline, kernel side first: the datapath (maps and TC
// programs), the hooks of the enabled features, the exporters behind their
// queues, the metrics over every stage, and the evictor between the kernel
// and the queues. Run starts it. On error nothing is left loaded.
func New(cfg *config.Config, opts Options) (_ *Agent, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	a := &Agent{cfg: cfg, opts: opts, log: opts.Logger, resolver: evictor.NewResolver(), ready: make(chan struct{}), watched: newWatched()}
	var exps []exporter.Exporter
	defer func() {
		if err != nil { // the one cleanup path
			for _, e := range exps {
				e.Close()
			}
			a.close()
		}
	}()
	// Kernel-side cost of our own programs: run time statistics on for the
	// agent's lifetime (not a global sysctl left behind), unless turned off:
	// they cost every BPF program on the node two clock reads per run.
	if cfg.BPFStats {
		if st, err := datapath.EnableBPFStats(); err != nil {
			a.log.Warn("BPF program run time statistics unavailable", "error", err)
		} else {
			a.bpfStats = st
		}
	}

	// 1. The datapath: every map, and the TC programs (feature "flows").
	enabled, err := registry.Enabled(cfg) // each configured from its own options
	if err != nil {
		return nil, err
	}
	filterTable, err := cfg.FilterTable()
	if err != nil {
		return nil, err
	}
	// The features' plans are known before the TC programs load: those
	// that run inside them (Plan.TC) are switched on by load-time constants.
	plans, kernelBTF := a.featurePlans(enabled)
	tc, sizes := map[string]any{}, map[string]uint32{}
	for _, h := range plans {
		if h.Err == nil {
			maps.Copy(tc, h.TC)
			maps.Copy(sizes, h.MapSizes)
			for _, m := range h.FlowSizedMaps {
				sizes[m] = uint32(cfg.CacheMaxFlows)
			}
		}
	}
	// Overlays (bpf/tunnel.h): the tunnel's outer endpoints go to the
	// inner flow's enrichment entry, read whenever a feature is on.
	if len(enabled) > 0 {
		tc["overlay_on"] = uint32(1)
	}
	// --overlay-outer-flows: the tunnel flows counted apart, for records
	// marked overlay_outer; their maps get a size only then.
	if cfg.OverlayOuterFlows {
		tc[datapath.OverlayOuterConstant] = uint32(1)
		for _, m := range datapath.OverlayOuterMaps {
			sizes[m] = uint32(cfg.CacheMaxFlows)
		}
	}
	a.DP, err = datapath.Load(datapath.Config{
		MaxFlows:         uint32(cfg.CacheMaxFlows),
		Sampling:         cfg.Sampling,
		FlowRules:        filterTable,
		TCConstants:      tc,
		MapSizes:         sizes,
		ForceLegacyTC:    opts.ForceLegacyTC || cfg.ForceClsact,
		Enrichment:       len(enabled) > 0,
		EnrichUnwatched:  cfg.EnrichUnwatched,
		SkipHookPrograms: opts.SkipHookPrograms,
		BTF:              kernelBTF,
		Logger:           a.log,

		ForcePerNamespacePrograms: opts.ForcePerNamespacePrograms,
	})
	if err != nil {
		return nil, fmt.Errorf("load datapath: %w", err)
	}

	// 2. The optional features' hooks; one the kernel refuses is reported
	// and the others run.
	running := a.startFeatures(enabled, plans)
	// Every program of the start is loaded: the parsed object need not
	// stay (ReleaseSpec; kept in the per-namespace fallback). The loads'
	// garbage (the kernel's BTF decoded for them, the object: ~7 MiB) is
	// most of the heap now: collected, and its pages returned to the
	// system, before the exporters, the metrics and the overflow ring's
	// mapping add theirs; a collection alone kept them resident, and the
	// start's peak came after it (docs/benchmarks.md §41). So are the
	// binary's pages the load touched.
	a.DP.ReleaseSpec()
	debug.FreeOSMemory()
	if opts.UnmapBinaryPages {
		if _, err := UnmapBinaryPages(); err != nil {
			a.log.Debug("binary pages not unmapped", "error", err)
		}
	}

	// The memory budget: the cgroup's limit less the BPF maps just loaded
	// (charged to the cgroup), and the bounds of what grows with traffic.
	limit, source := readOwnMemoryLimit()
	if opts.MemoryLimit > 0 {
		limit, source = opts.MemoryLimit, "Options.MemoryLimit"
	}
	a.Memory = newMemoryBudget(limit, source, a.mapsMemory(), cfg.CacheMaxFlows, cfg.GRPCBatchSize)
	a.log.Info("memory budget", "budget", a.Memory.String())
	if a.Memory.GoLimit == 0 {
		a.log.Warn("the BPF maps take the whole memory limit: lower --cache-max-flows or raise the limit", "budget", a.Memory.String())
	}

	// 3. The exporters, each behind its bounded queue.
	if exps, err = a.exporters(); err != nil {
		return nil, err
	}
	qcap := a.Memory.QueueBatches(cfg.ExportQueueBatches(), len(exps))
	if qcap < cfg.ExportQueueBatches() {
		a.log.Warn("--export-buffer lowered to fit the memory limit", "export_buffer", cfg.ExportQueueBatches(),
			"queue_batches", qcap, "exporters", len(exps), "budget", a.Memory.String())
	}
	for _, e := range exps {
		q := exporter.NewQueue(e, qcap, a.log)
		if cfg.ExportBuffer == 0 { // the default: records bounded by the flow map too
			q.LimitFlows(a.Memory.QueueFlows(len(exps)))
		}
		a.Queues = append(a.Queues, q)
	}

	a.newCapture()

	// 4. The metrics, over the stats every stage keeps.
	gens, err := datapath.NewGenerations(&a.DP.Maps, a.log)
	if err != nil {
		return nil, err
	}
	stats := &evictor.Stats{}
	if a.Metrics, err = a.newMetrics(stats, gens, running); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}

	// 5. The evictor: kernel maps → records → the queues.
	a.Evictor, err = evictor.New(evictor.Config{
		Generations: gens,
		Clock:       a.DP.Clock,
		Overflow:    a.DP.Maps.Overflow,
		MaxFlows:    uint32(cfg.CacheMaxFlows),
		Period:      cfg.CacheActiveTimeout,
		Sampling:    cfg.Sampling,
		Rates:       datapath.FlowRuleRates(filterTable, cfg.Sampling),
		BatchSize:   cfg.GRPCBatchSize,
		Resolver:    a.resolver,
		Sink:        a.Queues,
		Observer:    a.evictorMetrics,
		Stats:       stats,
		Features:    running,
		Logger:      a.log,

		OverflowMaxFlows: a.Memory.OverflowMaxFlows,
		OverlayOuter:     cfg.OverlayOuterFlows,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// mapsMemory is the memory of the datapath's BPF maps (memlock), which the
// kernel charges to the agent's cgroup; a map whose size is unreadable
// counts 0.
func (a *Agent) mapsMemory() int64 {
	var n int64
	for _, m := range datapath.MetricMaps(&a.DP.Maps)() {
		if v, err := m.Memory(); err == nil {
			n += int64(v)
		}
	}
	return n
}

// featurePlans asks each enabled feature for its plan on this kernel. The
// kernel's BTF it decodes for them is returned for the datapath's loads
// (datapath.Config.BTF): decoded once, not once per program.
func (a *Agent) featurePlans(enabled []feature.Feature) ([]datapath.Plan, *btf.Cache) {
	if len(enabled) == 0 {
		return nil, nil
	}
	cache := btf.NewCache()
	kernel, err := cache.Kernel()
	if err != nil {
		a.log.Warn("kernel BTF unreadable: drop reasons and TCP states will be numbers", "error", err)
		kernel, cache = nil, nil
	}
	plans := make([]datapath.Plan, len(enabled))
	for i, f := range enabled {
		plans[i] = f.Plan(kernel)
	}
	return plans, cache
}

// startFeatures starts the hooks of the enabled features (their plans) and
// returns the features whose hook runs.
func (a *Agent) startFeatures(enabled []feature.Feature, plans []datapath.Plan) []feature.Feature {
	if len(enabled) == 0 {
		return nil
	}
	var running []feature.Feature
	for i, st := range a.DP.StartHooks(plans) {
		switch {
		case st.Running:
			running = append(running, enabled[i])
			a.log.Info("enrichment hook running", "hook", st.Name, "program", st.Program)
		case errors.Is(st.Err, datapath.ErrRefused):
			a.log.Warn("enrichment hook refused by the kernel; the others run", "hook", st.Name, "error", st.Err)
		default:
			a.log.Warn("enrichment hook unavailable on this kernel; the others run", "hook", st.Name, "error", st.Err)
		}
	}
	return running
}

// newMetrics builds the registry; each stage brings its own collectors.
func (a *Agent) newMetrics(stats *evictor.Stats, gens *datapath.Generations, running []feature.Feature) (*metrics.Metrics, error) {
	bpfStats := a.bpfStats != nil
	dpMetrics := datapath.NewMetrics(metrics.Namespace, datapath.MetricSources{
		Counters:        a.DP.ReadCounters,
		FlowMapCapacity: uint64(a.cfg.CacheMaxFlows),
		FlowMapEntries:  gens.Entries,
		Attached:        a.DP.Attached,
		Hooks:           datapath.MetricHooks(a.DP),
		Programs:        datapath.MetricPrograms(a.DP),
		Maps:            datapath.MetricMaps(&a.DP.Maps),
		BPFStatsEnabled: func() bool { return bpfStats },
		EnrichmentLost:  a.DP.ReadEnrichmentLost,

		EnrichmentUnwatched: a.DP.ReadEnrichmentUnwatched,
		FilterRules:         a.filterRuleCounts(),
	}, a.log)
	a.evictorMetrics = evictor.NewMetrics(metrics.Namespace, stats)
	cs := append(dpMetrics.Collectors(), a.evictorMetrics.Collectors()...)
	cs = append(cs, exporter.NewCollector(metrics.Namespace, a.Queues))
	cs = append(cs, a.captureMetrics()...)
	for _, f := range running {
		if m, ok := f.(feature.MetricsSource); ok {
			cs = append(cs, m.Collectors(metrics.Namespace, &a.DP.Maps)...)
		}
	}
	return metrics.New(metrics.Options{Ready: metrics.ReadyWhenClosed(a.ready), Logger: a.log}, cs...)
}

// filterRuleCounts reads the packets each filter rule matched, labelled by
// rule name (or list index) and action; nil without rules.
func (a *Agent) filterRuleCounts() func() ([]datapath.RuleCount, error) {
	t := a.DP.FlowRules()
	if t == nil || len(t.Rules) == 0 {
		return nil
	}
	return func() ([]datapath.RuleCount, error) {
		n, err := a.DP.ReadFlowRuleCounters()
		if err != nil {
			return nil, err
		}
		out := make([]datapath.RuleCount, 0, len(t.Rules)+1)
		for i, r := range t.Rules {
			name := r.Name
			if name == "" {
				name = strconv.Itoa(r.Index)
			}
			out = append(out, datapath.RuleCount{Rule: name, Action: r.Action.String(), Packets: n[i]})
		}
		return append(out, datapath.RuleCount{Rule: "default", Action: t.Default.String(),
			Packets: n[datapath.FlowRuleDefault]}), nil
	}
}

// close releases what New built (New's error path, and the end of Run).
func (a *Agent) close() error {
	var err error
	if a.DP != nil {
		err = a.DP.Close()
		a.DP = nil
	}
	if a.bpfStats != nil {
		a.bpfStats.Close()
		a.bpfStats = nil
	}
	return err
}

func (a *Agent) exporters() ([]exporter.Exporter, error) {
	var out []exporter.Exporter
	for _, name := range a.cfg.Export {
		switch name {
		case "stdout":
			out = append(out, stdout.New(a.opts.Stdout))
		case "grpc":
			g, err := grpcexp.New(grpcexp.Config{Target: a.cfg.Target, TLS: a.cfg.GRPCTLSOn(), TLSCA: a.cfg.TLSCA,
				TokenFile: a.cfg.TokenFile, InsecurePlaintext: a.cfg.InsecurePlaintext,
				TLSCert: a.cfg.TLSCert, TLSKey: a.cfg.TLSKey, NodeName: a.cfg.NodeName, Logger: a.log,
				MaxUnackedBatches: a.cfg.ExportQueueBatches()})
			if err != nil {
				return out, fmt.Errorf("grpc exporter: %w", err)
			}
			a.grpc = g
			out = append(out, g)
		case "kafka":
			k := a.cfg.Kafka
			x, err := kafkaexp.New(kafkaexp.Config{
				Conn: flowkafka.Conn{Brokers: k.Brokers, TLS: k.TLS, TLSCA: k.TLSCA, TLSCert: k.TLSCert, TLSKey: k.TLSKey,
					SASL: k.SASLMechanism, SASLUser: k.SASLUsername, SASLPasswordFile: k.SASLPasswordFile},
				Topic: k.Topic, Compression: k.Compression, Linger: k.Linger, MaxBatchBytes: k.MaxBatchBytes,
				Acks: k.Acks, Message: k.Message, BatchFlows: k.BatchFlows, NodeName: a.cfg.NodeName, Logger: a.log,
				MaxBufferedBytes: int(a.Memory.ExporterBytes)})
			if err != nil {
				return out, err
			}
			a.kafka = x
			out = append(out, x)
		case "ipfix":
			x, err := ipfix.New(ipfix.Config{Target: a.cfg.IPFIXTarget, Transport: a.cfg.IPFIXTransport,
				DomainID: a.cfg.IPFIXDomainID, TemplateRefresh: a.cfg.IPFIXTemplateRefresh,
				MaxMessageBytes: a.cfg.IPFIXMaxMessageSize, EnterpriseNumber: a.cfg.IPFIXEnterpriseNumber, Logger: a.log})
			if err != nil {
				return out, fmt.Errorf("ipfix exporter: %w", err)
			}
			out = append(out, x)
		case "otlp":
			o, err := otlp.New(otlp.Config{Endpoint: a.cfg.OTLPEndpoint, Protocol: a.cfg.OTLPProtocol,
				TLS: a.cfg.OTLPTLSOn(), TLSCA: a.cfg.OTLPTLSCA, TLSCert: a.cfg.OTLPTLSCert, TLSKey: a.cfg.OTLPTLSKey,
				Headers: a.cfg.OTLPHeaders, Compression: a.cfg.OTLPCompression, BatchFlows: a.cfg.OTLPBatchFlows,
				NodeName: a.cfg.NodeName, Version: version.Version, Logger: a.log})
			if err != nil {
				return out, fmt.Errorf("otlp exporter: %w", err)
			}
			out = append(out, o)
		default:
			return out, fmt.Errorf("exporter %q is not available in this build", name)
		}
	}
	return append(out, a.opts.ExtraExporters...), nil
}

// KafkaStats are the kafka exporter's counts (nil without --export kafka);
// they stay readable after Run returns.
func (a *Agent) KafkaStats() *kafkaexp.Stats {
	if a.kafka == nil {
		return nil
	}
	return &a.kafka.Stats
}

// MetricsAddr is the address the metrics server listens on ("" if none).
func (a *Agent) MetricsAddr() string {
	if p := a.metricsAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// Ready is closed once every interface present at start has been attached
// (or skipped, and logged why): the watcher's initial listing is handled.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Run runs the agent until ctx is done, then detaches, flushes the flows
// left in the kernel to the exporters and closes everything.
func (a *Agent) Run(ctx context.Context) (runErr error) {
	defer func() { runErr = errors.Join(runErr, a.close()) }()
	watched, err := config.NewInterfaceSelection(a.cfg.Interfaces, a.cfg.ExcludeInterfaces)
	if err != nil {
		return err
	}
	if a.cfg.MetricsAddress != "" {
		srv, err := a.Metrics.Listen(a.cfg.MetricsAddress, a.cfg.WebConfigFile)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		addr := srv.Addr().String()
		a.metricsAddr.Store(&addr)
		a.log.Info("serving metrics", "address", addr, "paths", "/metrics /healthz /readyz", "tls", a.cfg.WebConfigFile != "")
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), config.MetricsShutdownWait)
			defer cancel()
			srv.Shutdown(ctx)
		}()
	}
	w := ifaces.New(ifaces.Options{Allowed: watched.Allowed, ReportExcluded: true, ReportSynced: true,
		Netns: watchedNetns(a.cfg.Netns), NetnsDir: a.cfg.NetnsDir, Logger: a.log})

	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	for _, q := range a.Queues {
		go q.Run(runCtx) // ends once its queue is closed (Queue.Close waits for it, within budget)
	}
	// From the signal on, the last evictions wait a bounded time for room
	// in the queues: each queue its own budget, and none past a deadline.
	defer context.AfterFunc(ctx, func() {
		a.Queues.StopWaiting(config.ShutdownQueueWait, time.Now().Add(config.ShutdownPushWait))
	})()

	a.zones = newZoner(&a.DP.Maps, a.log)
	events := make(chan ifaces.Event, 64)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchErr := make(chan error, 1)
	go func() { watchErr <- w.Run(watchCtx, events); close(events) }()

	evCtx, stopEv := context.WithCancel(ctx)
	evDone := make(chan error, 1)
	go func() { evDone <- a.Evictor.Run(evCtx) }()
	// Packet capture's control stream: its captures end with it, before
	// the datapath is detached.
	stopCapture := a.runCapture(ctx)

	for ev := range events {
		a.handle(ev)
	}
	if err := <-watchErr; err != nil && !errors.Is(err, context.Canceled) {
		runErr = fmt.Errorf("interface watcher: %w", err)
	}
	stopEv()
	<-evDone
	stopCapture()

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
	// Every exporter at once, each within its own budget: a dead consumer
	// spends its own only, and what it leaves queued is counted and logged.
	runErr = errors.Join(runErr, a.Queues.Close(config.ExportShutdownBudget))
	stop()
	return runErr
}

// handle attaches to an interface that appeared, detaches from one that
// went away, and says so: one line per interface event (attached, skipped
// and why, detached), so that a user sees what is watched.
func (a *Agent) handle(ev ifaces.Event) {
	it := ev.Iface
	key := evictor.IfaceKey{Netns: it.NetnsCookie, Ifindex: uint32(it.Index)}
	switch ev.Type {
	case ifaces.Synced:
		// Every interface there at start has been handled: say what is
		// watched, and become ready.
		a.log.Info(a.watched.summary(), "skipped", a.watched.skipped)
		close(a.ready)
	case ifaces.Excluded:
		// Not watched, but a packet may still cross it between namespaces.
		a.zones.seen(it, false)
		a.zones.update()
		a.watched.skipped++
		a.log.Info("interface skipped", "interface", it.Name, "netns", it.Netns, "ifindex", it.Index,
			"reason", "excluded by --interfaces/--exclude-interfaces")
	case ifaces.Added:
		a.resolver.Add(key, it.Name, it.Netns)
		// Its namespace's zones before its first packet.
		a.zones.seen(it, true)
		a.zones.update()
		if err := a.DP.Attach(it); err != nil {
			a.watched.skipped++
			a.log.Warn("interface skipped", "interface", it.Name, "netns", it.Netns, "ifindex", it.Index,
				"reason", "attach failed: "+err.Error())
			return
		}
		hook := a.DP.AttachMode(it)
		a.watched.add(it, hook)
		a.log.Info("attached", "interface", it.Name, "netns", it.Netns, "ifindex", it.Index, "hook", hook)
	case ifaces.Removed:
		a.resolver.Remove(key)
		a.zones.gone(it)
		a.zones.update()
		if !a.watched.remove(it) {
			return // never attached (the attach failed)
		}
		if err := a.DP.Detach(it); err != nil {
			a.log.Warn("detach", "interface", it.Name, "netns", it.Netns, "error", err)
			return
		}
		a.log.Info("detached", "interface", it.Name, "netns", it.Netns, "ifindex", it.Index, "reason", "interface removed or renamed")
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

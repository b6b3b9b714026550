// Command flowlens-agent is the flowlens node agent: it attaches the TC
// datapath to the node's interfaces and exports the flows it aggregates.
// --help lists its settings (flags, FLOWLENS_AGENT_* variables, YAML file: see
// internal/agent/config); --version prints the version.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/shared/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process. It returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(args, os.Getenv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		config.Usage(stdout)
		return 0
	case errors.Is(err, config.ErrVersion):
		fmt.Fprintln(stdout, version.String("flowlens-agent"))
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "flowlens-agent: %v\n", err)
		return 2
	}
	started := agent.SetStartGCPercent(os.Getenv)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	slog.SetDefault(log)
	// What the package inits and the options touched of the binary (~10
	// MiB, most never run again) leaves the RSS before the programs' load,
	// the start's peak (docs/benchmarks.md §41).
	unmapBinaryPages(log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := agent.New(cfg, agent.Options{Stdout: stdout, Logger: log, UnmapBinaryPages: true})
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	go func() { // the start-up's GC target until every interface is attached
		select {
		case <-a.Ready():
		case <-ctx.Done():
		}
		started()
		// The start's heap pages, free since its loads' garbage was
		// collected, go back to the system now rather than when the
		// runtime's scavenger gets to them: ~2 MiB less resident after
		// start, ~1 MiB under light traffic (docs/benchmarks.md, "the
		// agent's memory, third round"). So do the binary's pages the
		// start touched: what the steady state runs comes back at its
		// first call (§41).
		debug.FreeOSMemory()
		unmapBinaryPages(log)
	}()
	if agent.SetGoMemoryLimit(a.Memory, os.Getenv) {
		log.Info("Go memory limit set from the cgroup's", "gomemlimit", a.Memory.GoLimit)
	}
	log.Info("flowlens-agent started", "netns", cfg.Netns, "export", cfg.Export,
		"cache_active_timeout", cfg.CacheActiveTimeout, "cache_max_flows", cfg.CacheMaxFlows, "sampling", cfg.Sampling)
	if err := a.Run(ctx); err != nil {
		log.Error("stopped with errors", "error", err)
		return 1
	}
	log.Info("flowlens-agent stopped: all hooks detached, flows flushed")
	return 0
}

// unmapBinaryPages unmaps the binary's read-only pages
// (agent.UnmapBinaryPages); a failure costs only memory, said at debug level.
func unmapBinaryPages(log *slog.Logger) {
	if _, err := agent.UnmapBinaryPages(); err != nil {
		log.Debug("binary pages not unmapped", "error", err)
	}
}

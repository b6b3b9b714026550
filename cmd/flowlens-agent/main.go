// Command flowlens-agent is the flowlens node agent: it attaches the TC
// datapath to the node's interfaces and exports the flows it aggregates.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/config"
)

func main() {
	os.Exit(run())
}

func run() int {
	cfg, err := config.Load(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		config.Usage(os.Stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "flowlens-agent: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	slog.SetDefault(log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := agent.New(cfg, agent.Options{Stdout: os.Stdout, Logger: log})
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
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

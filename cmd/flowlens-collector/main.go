// Command flowlens-collector receives flows from flowlens agents over gRPC
// (and from Kafka), resolves their addresses to Kubernetes context, serves
// Prometheus metrics derived from them, keeps a history for `flowlens
// observe`, and prints them as JSON lines or a table, optionally filtered.
// It is the reference consumer of the flow API (api/flow/v1); its wiring and
// option table are internal/collector: this command loads, builds, runs.
//
//	flowlens-collector --listen :9990 --tls-cert tls.crt --tls-key tls.key --output table --proto tcp --port 443
//	flowlens-agent --export grpc --target collector-host:9990 --tls-ca ca.crt
//
// Every flag can also be set with a FLOWLENS_COLLECTOR_<NAME> environment
// variable or in a YAML file given by --config (docs/metrics.md, --help).
// A bad setting exits with status 2 and a message naming the flag.
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
	"syscall"

	"github.com/flowlens/flowlens/internal/collector"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil))
}

// env is what tests replace: the collector's Options (Stdout and Logger
// are set by run) and getenv (nil: os.Getenv) for FLOWLENS_COLLECTOR_*.
type env struct {
	collector.Options
	getenv func(string) string
}

// run is main without the process. It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, e *env) int {
	if e == nil {
		e = &env{}
	}
	if e.getenv == nil {
		e.getenv = os.Getenv
	}
	cfg, err := collector.Load(args, e.getenv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		collector.Spec.Usage(stdout)
		return 0
	case errors.Is(err, cliconf.ErrVersion):
		fmt.Fprintln(stdout, version.String("flowlens-collector"))
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "flowlens-collector: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	e.Stdout, e.Logger = stdout, log
	c, err := collector.New(*cfg, e.Options)
	if err != nil {
		log.Error("cannot start", "error", err)
		if errors.Is(err, collector.ErrConfig) {
			return 2
		}
		return 1
	}
	if err := c.Run(ctx); err != nil {
		log.Error("stopped with errors", "error", err)
		return 1
	}
	return 0
}

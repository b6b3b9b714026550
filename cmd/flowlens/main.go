// Command flowlens is the flowlens client. Its subcommand observe
// asks flowlens collectors for the flows of their history (the
// FlowHistory API of api/flow/v1 on the collector's --listen), filtered in
// the collector, and prints them as a table, compact lines, JSON lines (the
// collector's own JSON) or protobuf JSON; with --follow it then streams new
// flows as they arrive. Several collectors (--server repeated, or every
// collector pod of a cluster, reached through port-forwards it sets up
// itself from the kubeconfig) are merged by time.
//
//	flowlens observe --server collector:9990 --namespace shop --drops --last 100
//	flowlens observe -n flowlens --pod shop/checkout-7d9f8 -f -o compact
//
// Its subcommand ui serves the collectors' service map (their
// /api/v1/graph and /api/v1/flows, merged with package servicemap, and
// the page they embed) on a local port and opens the browser (ui.go,
// docs/ui.md). Its subcommand capture captures packets on the nodes
// through the collectors and writes them as pcapng (capture.go, pcapng.go,
// docs/capture.md).
//
// docs/observe.md has every flag and the filter semantics; the flags are
// also FLOWLENS_OBSERVE_* variables and keys of a --config file (package
// cliconf, as every flowlens binary). Bad settings exit
// with status 2 and a message naming the setting.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/flowlens/flowlens/internal/shared/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

const usage = `Usage: flowlens <command> [flags]

Commands:
  observe    print the flows of flowlens collectors' history, filtered, and follow new ones
  ui         serve the collectors' service map on a local port and open it in the browser
  capture    capture packets on the nodes, with their Kubernetes context, to pcapng

flowlens observe --help lists its flags; --version prints the version.
`

// run is main without the process (env looks up environment variables).
// It returns the exit code.
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "observe":
		return observe(ctx, args[1:], env, stdout, stderr)
	case "ui":
		return ui(ctx, args[1:], env, stdout, stderr)
	case "capture":
		return captureCmd(ctx, args[1:], env, stdout, stderr)
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, version.String("flowlens"))
		return 0
	}
	fmt.Fprintf(stderr, "flowlens: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// Command flowlens-operator runs the FlowCollector controller: it keeps the
// flowlens agent DaemonSet, its configuration, RBAC and metrics Service in
// line with the cluster's FlowCollector resource.
//
// --help lists its settings (flags, FLOWLENS_OPERATOR_* variables, a YAML
// file: config.go). Its metrics (controller-runtime's registry, plus
// flowlens_operator_build_info) are plain HTTP unless --metrics-secure:
// then HTTPS with tls.crt and tls.key of --metrics-cert-path (reloaded when
// they change; a self-signed certificate without the flag) and, with
// --metrics-client-ca, only for clients presenting a certificate of that CA.
//
// A bad setting exits with status 2; --version prints the version
// (internal/shared/version) and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flowlens/flowlens/internal/operator/controller"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/version"
)

func main() {
	err := run(ctrl.SetupSignalHandler(), os.Args[1:], os.Getenv, os.Stdout)
	var ue usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &ue):
		fmt.Fprintln(os.Stderr, "flowlens-operator:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "flowlens-operator:", err)
		os.Exit(1)
	}
}

// usageError is a bad setting: exit status 2, as the other binaries.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// run is main without the process, until ctx ends: env looks up the
// FLOWLENS_OPERATOR_* variables; --help and --version print on stdout.
func run(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	o, err := spec.Load(args, env)
	switch {
	case errors.Is(err, flag.ErrHelp):
		spec.Usage(stdout)
		return err
	case errors.Is(err, cliconf.ErrVersion):
		fmt.Fprintln(stdout, version.String("flowlens-operator"))
		return nil
	case err != nil:
		return usageError{err}
	}
	cfg, err := o.restConfig()
	if err != nil {
		return err
	}
	return controller.Run(ctx, cfg, controller.RunOptions{
		AgentImage: o.agentImage, CollectorImage: o.collectorImage,
		Metrics: o.metrics, HealthProbeAddr: o.probeAddr,
		LeaderElection: o.leaderElect, LeaseNamespace: o.leaseNamespace,
		LogLevel: o.zapLevel(),
	})
}

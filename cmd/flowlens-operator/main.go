// Command flowlens-operator runs the FlowCollector controller: it keeps the
// flowlens agent DaemonSet, its configuration, RBAC and metrics Service in
// line with the cluster's FlowCollector resource.
//
// Usage:
//
//	flowlens-operator [--kubeconfig FILE] [--agent-image IMAGE] [--collector-image IMAGE] [--leader-elect]
//	    [--metrics-bind-address :8080] [--health-probe-bind-address :8081]
//	    [--zap-log-level info] [--version]
//
// A bad flag exits with status 2; --version prints the version
// (internal/version) and exits 0.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/controller"
	"github.com/flowlens/flowlens/internal/version"
)

// fallbackAgentTag is the agent image tag of a build that is not a release
// (version.Version "dev", or a git describe such as v0.1.0-3-gabcdef).
const fallbackAgentTag = "v0.1.0"

var releaseVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-rc\.[0-9]+)?$`)

// defaultAgentImage is the agent image of the operator's own release, set at
// build time through internal/version.
func defaultAgentImage() string { return releaseImage("flowlens-agent") }

// defaultCollectorImage is the collector image of the operator's own
// release, for the Kafka collector Deployment.
func defaultCollectorImage() string { return releaseImage("flowlens-collector") }

func releaseImage(name string) string {
	tag := version.Version
	if !releaseVersion.MatchString(tag) {
		tag = fallbackAgentTag
	}
	return "ghcr.io/flowlens/" + name + ":" + tag
}

func main() {
	err := run(os.Args[1:], os.Stdout)
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

// usageError is a bad command line: exit status 2, as the other binaries.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// run is main without the process; --version prints on stdout.
func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("flowlens-operator", flag.ContinueOnError)
	var (
		agentImage   = fs.String("agent-image", defaultAgentImage(), "agent image used when a FlowCollector sets no spec.agent.image")
		collImage    = fs.String("collector-image", defaultCollectorImage(), "Kafka collector image used when a FlowCollector sets no spec.collector.image")
		metricsAddr  = fs.String("metrics-bind-address", ":8080", `address of the operator's Prometheus metrics; "0" disables`)
		probeAddr    = fs.String("health-probe-bind-address", ":8081", "address of /healthz and /readyz")
		leaderElect  = fs.Bool("leader-elect", false, "elect a leader, so that only one of several replicas reconciles")
		leaseNS      = fs.String("leader-election-namespace", "", "namespace of the leader election Lease (default: the operator's own)")
		printVersion = fs.Bool("version", false, "print the version and exit")
	)
	ctrlconfig.RegisterFlags(fs) // --kubeconfig, for running out of the cluster
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if *printVersion {
		fmt.Fprintln(stdout, version.String("flowlens-operator"))
		return nil
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q: flowlens-operator takes only flags", fs.Arg(0))}
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cache.Options{ByObject: controller.CacheByObject()},
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "flowlens-operator.flowlens.io",
		LeaderElectionNamespace: *leaseNS,
		// The operator exits right after losing the lease, so a standby can
		// take over at once.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	r := &controller.FlowCollectorReconciler{
		Client:                mgr.GetClient(),
		APIReader:             mgr.GetAPIReader(),
		DefaultImage:          *agentImage,
		DefaultCollectorImage: *collImage,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("starting", "version", version.Version, "agentImage", *agentImage, "collectorImage", *collImage)
	return mgr.Start(ctrl.SetupSignalHandler())
}

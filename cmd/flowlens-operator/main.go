// Command flowlens-operator runs the FlowCollector controller: it keeps the
// flowlens agent DaemonSet, its configuration, RBAC and metrics Service in
// line with the cluster's FlowCollector resource.
//
// Usage:
//
//	flowlens-operator [--kubeconfig FILE] [--agent-image IMAGE] [--leader-elect]
//	    [--metrics-bind-address :8080] [--health-probe-bind-address :8081]
//	    [--zap-log-level info]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

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
)

// version is the release, set at build time with
// -ldflags "-X main.version=v0.1.0"; it picks the default agent image.
var version = "v0.1.0"

func main() {
	if err := run(os.Args[1:]); errors.Is(err, flag.ErrHelp) {
		return
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "flowlens-operator:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("flowlens-operator", flag.ContinueOnError)
	var (
		agentImage   = fs.String("agent-image", "ghcr.io/flowlens/flowlens-agent:"+version, "agent image used when a FlowCollector sets no spec.image")
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
		return err
	}
	if *printVersion {
		fmt.Println(version)
		return nil
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
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		DefaultImage: *agentImage,
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
	ctrl.Log.WithName("setup").Info("starting", "version", version, "agentImage", *agentImage)
	return mgr.Start(ctrl.SetupSignalHandler())
}

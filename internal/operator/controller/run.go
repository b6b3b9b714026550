package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/shared/version"
)

// RunOptions are what Run takes from the operator's configuration
// (cmd/flowlens-operator).
type RunOptions struct {
	// AgentImage and CollectorImage are the images of a FlowCollector that
	// names none.
	AgentImage, CollectorImage string
	// Metrics is the metrics server's: address, HTTPS, client CA.
	Metrics metricsserver.Options
	// HealthProbeAddr serves /healthz and /readyz.
	HealthProbeAddr string
	// LeaderElection makes one of several replicas reconcile, its Lease in
	// LeaseNamespace ("": the operator's own).
	LeaderElection bool
	LeaseNamespace string
	LogLevel       zapcore.Level
}

var skipNameValidation = true

// Run runs the FlowCollector reconciler in a controller-runtime manager on
// the cluster cfg reaches, until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o RunOptions) error {
	ctrl.SetLogger(zap.New(zap.Level(o.LogLevel)))
	// The registry is global: a second run in one process (tests) finds it
	// there already.
	if err := ctrlmetrics.Registry.Register(version.NewCollector("flowlens_operator")); err != nil &&
		!errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cache.Options{ByObject: CacheByObject()},
		Metrics:                 o.Metrics,
		HealthProbeBindAddress:  o.HealthProbeAddr,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "flowlens-operator.flowlens.io",
		LeaderElectionNamespace: o.LeaseNamespace,
		// The operator exits right after losing the lease, so a standby can
		// take over at once.
		LeaderElectionReleaseOnCancel: true,
		// One controller per run, but tests run several operators in one
		// process (cmd/flowlens-operator's metrics tests).
		Controller: config.Controller{SkipNameValidation: &skipNameValidation},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	r := &FlowCollectorReconciler{
		Client:                mgr.GetClient(),
		APIReader:             mgr.GetAPIReader(),
		DefaultImage:          o.AgentImage,
		DefaultCollectorImage: o.CollectorImage,
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
	ctrl.Log.WithName("setup").Info("starting", "version", version.Version, "agentImage", o.AgentImage,
		"collectorImage", o.CollectorImage, "metrics", o.Metrics.BindAddress, "metricsSecure", o.Metrics.SecureServing)
	return mgr.Start(ctx)
}

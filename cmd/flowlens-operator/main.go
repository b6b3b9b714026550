// Command flowlens-operator runs the FlowCollector controller: it keeps the
// flowlens agent DaemonSet, its configuration, RBAC and metrics Service in
// line with the cluster's FlowCollector resource.
//
// Usage:
//
//	flowlens-operator [--kubeconfig FILE] [--agent-image IMAGE] [--collector-image IMAGE] [--leader-elect]
//	    [--metrics-bind-address :8080] [--health-probe-bind-address :8081]
//	    [--metrics-secure [--metrics-cert-path DIR] [--metrics-client-ca FILE]]
//	    [--zap-log-level info] [--version]
//
// Its metrics (controller-runtime's registry, plus
// flowlens_operator_build_info) are plain HTTP unless --metrics-secure:
// then HTTPS with tls.crt and tls.key of --metrics-cert-path (reloaded when
// they change; a self-signed certificate without the flag) and, with
// --metrics-client-ca, only for clients presenting a certificate of that CA.
//
// A bad flag exits with status 2; --version prints the version
// (internal/shared/version) and exits 0.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/controller"
	"github.com/flowlens/flowlens/internal/shared/version"
)

// fallbackAgentTag is the agent image tag of a build that is not a release
// (version.Version "dev", or a git describe such as v0.1.0-3-gabcdef).
const fallbackAgentTag = "v0.1.0"

var releaseVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-rc\.[0-9]+)?$`)

// defaultAgentImage is the agent image of the operator's own release, set at
// build time through internal/shared/version.
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
	err := run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stdout)
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

// run is main without the process, until ctx ends; --version prints on
// stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("flowlens-operator", flag.ContinueOnError)
	var (
		agentImage   = fs.String("agent-image", defaultAgentImage(), "agent image used when a FlowCollector sets no spec.agent.image")
		collImage    = fs.String("collector-image", defaultCollectorImage(), "Kafka collector image used when a FlowCollector sets no spec.collector.image")
		metricsAddr  = fs.String("metrics-bind-address", ":8080", `address of the operator's Prometheus metrics; "0" disables`)
		probeAddr    = fs.String("health-probe-bind-address", ":8081", "address of /healthz and /readyz")
		leaderElect  = fs.Bool("leader-elect", false, "elect a leader, so that only one of several replicas reconciles")
		leaseNS      = fs.String("leader-election-namespace", "", "namespace of the leader election Lease (default: the operator's own)")
		printVersion = fs.Bool("version", false, "print the version and exit")
		secure       = fs.Bool("metrics-secure", false, "serve the metrics over HTTPS")
		certPath     = fs.String("metrics-cert-path", "", "directory holding tls.crt and tls.key for --metrics-secure (reloaded when they change); empty: a self-signed certificate")
		clientCA     = fs.String("metrics-client-ca", "", "CA certificate file; with --metrics-secure, only clients presenting a certificate it signed may scrape")
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
	metricsOpts, err := metricsOptions(*metricsAddr, *secure, *certPath, *clientCA)
	if err != nil {
		return usageError{err}
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	// The registry is global: a second run in one process (tests) finds it
	// there already.
	if err := ctrlmetrics.Registry.Register(version.NewCollector("flowlens_operator")); err != nil &&
		!errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return err
	}

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
		Metrics:                 metricsOpts,
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
	ctrl.Log.WithName("setup").Info("starting", "version", version.Version, "agentImage", *agentImage, "collectorImage", *collImage,
		"metrics", *metricsAddr, "metricsSecure", *secure)
	return mgr.Start(ctx)
}

// metricsOptions are the metrics server's options from the --metrics-*
// flags. Files are checked here: controller-runtime would fall back to a
// self-signed certificate, silently, when those of --metrics-cert-path are
// missing.
func metricsOptions(addr string, secure bool, certPath, clientCA string) (metricsserver.Options, error) {
	o := metricsserver.Options{BindAddress: addr, SecureServing: secure}
	if !secure {
		if certPath != "" || clientCA != "" {
			return o, errors.New("--metrics-cert-path and --metrics-client-ca need --metrics-secure")
		}
		return o, nil
	}
	if certPath != "" {
		for _, f := range []string{"tls.crt", "tls.key"} {
			if _, err := os.Stat(filepath.Join(certPath, f)); err != nil {
				return o, fmt.Errorf("invalid --metrics-cert-path %q: %w", certPath, err)
			}
		}
		o.CertDir = certPath
	}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return o, fmt.Errorf("invalid --metrics-client-ca %q: %w", clientCA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return o, fmt.Errorf("invalid --metrics-client-ca %q: no PEM certificate in it", clientCA)
		}
		o.TLSOpts = append(o.TLSOpts, func(c *tls.Config) {
			c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
		})
	}
	return o, nil
}

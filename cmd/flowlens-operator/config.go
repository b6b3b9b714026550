package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/version"
)

// options is the operator's configuration, filled in by spec.Load.
type options struct {
	agentImage, collectorImage string
	kubeconfig                 string
	leaderElect                bool
	leaseNamespace             string
	probeAddr                  string
	metricsAddr                string
	metricsSecure              bool
	metricsCertPath            string
	metricsClientCA            string
	level                      slog.Level

	// metrics is the metrics server's options, built from the --metrics-*
	// options by validate (which reads their files).
	metrics metricsserver.Options
}

// spec is the operator's configuration, on the machinery every flowlens
// binary shares (package cliconf): --agent-image is also
// FLOWLENS_OPERATOR_AGENT_IMAGE and the key agent_image in the YAML file
// named by --config or FLOWLENS_OPERATOR_CONFIG.
var spec = &cliconf.Spec[options]{
	Program:   "flowlens-operator",
	Summary:   "Runs the FlowCollector controller: keeps the flowlens agent DaemonSet, its configuration, RBAC and metrics Service, and the Kafka collector, in line with the cluster's FlowCollector resource.",
	EnvPrefix: "FLOWLENS_OPERATOR_",
	Validate:  (*options).validate,
	Options: slices.Concat(
		cliconf.InSection("Images", []*cliconf.Option[options]{
			{Name: "agent-image", Arg: "image", Default: defaultAgentImage(),
				Usage: "agent image used when a FlowCollector sets no spec.agent.image",
				Set:   cliconf.String(func(o *options) *string { return &o.agentImage })},
			{Name: "collector-image", Arg: "image", Default: defaultCollectorImage(),
				Usage: "Kafka collector image used when a FlowCollector sets no spec.collector.image",
				Set:   cliconf.String(func(o *options) *string { return &o.collectorImage })},
		}),
		cliconf.InSection("Cluster", []*cliconf.Option[options]{
			{Name: "kubeconfig", Arg: "file",
				Usage: "kubeconfig file, for running out of the cluster (default: $KUBECONFIG, the in-cluster service account, ~/.kube/config)",
				Set:   cliconf.String(func(o *options) *string { return &o.kubeconfig })},
			{Name: "leader-elect", Arg: "bool", Default: "false", Bool: true,
				Usage: "elect a leader, so that only one of several replicas reconciles",
				Set:   cliconf.Bool(func(o *options) *bool { return &o.leaderElect })},
			{Name: "leader-election-namespace", Arg: "namespace",
				Usage: "namespace of the leader election Lease (default: the operator's own)",
				Set:   cliconf.String(func(o *options) *string { return &o.leaseNamespace })},
		}),
		cliconf.InSection("Metrics and health", []*cliconf.Option[options]{
			{Name: "metrics-bind-address", Arg: "host:port", Default: ":8080",
				Usage: `address of the operator's Prometheus metrics; "0" disables`,
				Set:   cliconf.String(func(o *options) *string { return &o.metricsAddr })},
			{Name: "health-probe-bind-address", Arg: "host:port", Default: ":8081",
				Usage: "address of /healthz and /readyz",
				Set:   cliconf.String(func(o *options) *string { return &o.probeAddr })},
			{Name: "metrics-secure", Arg: "bool", Default: "false", Bool: true,
				Usage: "serve the metrics over HTTPS; without --metrics-client-ca, only to a bearer token allowed get on /metrics (TokenReview, SubjectAccessReview)",
				Set:   cliconf.Bool(func(o *options) *bool { return &o.metricsSecure })},
			{Name: "metrics-cert-path", Arg: "dir",
				Usage: "directory holding tls.crt and tls.key for --metrics-secure (reloaded when they change); empty: a self-signed certificate",
				Set:   cliconf.String(func(o *options) *string { return &o.metricsCertPath })},
			{Name: "metrics-client-ca", Arg: "file",
				Usage: "CA certificate file; with --metrics-secure, only clients presenting a certificate it signed may scrape",
				Set:   cliconf.String(func(o *options) *string { return &o.metricsClientCA })},
		}),
		cliconf.InSection("Operator", []*cliconf.Option[options]{
			{Name: "log-level", Arg: "level", Default: "info",
				Usage: "debug, info, warn or error (JSON logs on stderr)",
				Set:   cliconf.Level(func(o *options) *slog.Level { return &o.level })},
		}),
	),
}

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

func (o *options) validate() error {
	if err := cliconf.CheckLevel("--log-level", o.level); err != nil {
		return err
	}
	m, err := metricsOptions(o.metricsAddr, o.metricsSecure, o.metricsCertPath, o.metricsClientCA)
	o.metrics = m
	return err
}

// zapLevel is the log level for controller-runtime's zap logger.
func (o *options) zapLevel() zapcore.Level {
	switch {
	case o.level <= slog.LevelDebug:
		return zapcore.DebugLevel
	case o.level <= slog.LevelInfo:
		return zapcore.InfoLevel
	case o.level <= slog.LevelWarn:
		return zapcore.WarnLevel
	}
	return zapcore.ErrorLevel
}

// restConfig is the cluster's client configuration: --kubeconfig, else
// client-go's usual search ($KUBECONFIG, in-cluster, ~/.kube/config).
func (o *options) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
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
	if clientCA == "" {
		// No client certificate to tell scrapers by: a bearer token, which
		// the API server reviews (TokenReview), allowed get on the
		// non-resource URL /metrics (SubjectAccessReview): the ClusterRole
		// flowlens-metrics-reader of docs/security.md.
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
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

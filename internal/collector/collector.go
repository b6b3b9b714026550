// Package collector is flowlens-collector wired: the receivers (the gRPC
// server of pkg/receiver, and a Kafka consumer when brokers are given)
// hand their batches to the enrichment (enrich.Pipeline over a k8smeta
// resolver), which feeds the Prometheus metrics, the flow history
// (history.Service, served on the gRPC listener) and the printer on
// stdout. The stages live in the subpackages enrich, history and k8smeta;
// this package builds them from a Config and runs them, as internal/agent
// does for the agent. Its option table (Spec, options*.go: flags,
// FLOWLENS_COLLECTOR_* variables, YAML keys, defaults, range checks) fills
// the Config: cmd/flowlens-collector calls Load, then New and Run, and the
// operator's renderer imports the defaults it writes (DefaultKafkaGroup,
// DefaultMetricsPort).
//
// New builds and binds everything; Run serves until its context ends.
// Whatever fails, in New or in Run, the collector leaves through one
// ordered shutdown (Collector.shutdown) over what was built.
package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/rest"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/capturerelay"
	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/collector/history"
	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/flowquery"
	"github.com/flowlens/flowlens/internal/shared/httpserve"
	"github.com/flowlens/flowlens/internal/shared/version"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// Config is the collector's whole configuration, in plain values: Load
// fills it from the option table (Spec, options.go), which also checks the
// ranges.
type Config struct {
	// Listen is the gRPC address agents export to and the history is
	// read from; "" serves no gRPC.
	Listen string
	// InsecurePlaintext allows plaintext on a Listen that is not loopback.
	InsecurePlaintext bool
	// Auth is the per-call authorization: AuthAuto, AuthKubernetes or
	// AuthNone.
	Auth string
	// Output is how flows are printed: "json" (one object per line),
	// "table" or "none" (metrics and history only).
	Output string
	// Print is the flow query (package flowquery) of the flows printed:
	// --ip, --port and --proto (nil: all); metrics and history see every
	// flow.
	Print *flowv1.FlowFilter
	// TLSCert and TLSKey serve TLS; TLSClientCA also requires agents'
	// client certificates (mTLS).
	TLSCert, TLSKey, TLSClientCA string
	Limits                       receiver.Options
	// ShutdownGrace bounds how long shutdown waits for batches in hand.
	ShutdownGrace time.Duration
	// LogLevel is the command's: it builds Options.Logger with it.
	LogLevel slog.Level

	MetricsAddress string // "" serves no metrics, health or readiness
	WebConfigFile  string // exporter-toolkit web configuration ("": plain HTTP)
	Metrics        enrich.MetricsOptions

	// Kafka is consumed, as a member of its group, when Brokers is set.
	Kafka      receiver.ConsumerOptions
	History    History
	UI         UI
	Enrichment Enrichment
}

// History sizes the flow history; Size 0 keeps none.
type History struct {
	Size   int
	MaxAge time.Duration
	// Bounds of the requests (history.Options).
	MaxFilterTerms, MaxRequestBytes                 int
	MaxFollowers, MaxFollowersPerClient, MaxQueries int
}

// Enrichment says where Kubernetes context comes from: StaticFile, else a
// cluster (Kubeconfig, else the in-cluster service account), else none.
type Enrichment struct {
	// Enable is --k8s-enrich: nil is auto (on in a cluster or with a
	// Kubeconfig), false is off, true requires a cluster.
	Enable      *bool
	Kubeconfig  string
	SyncTimeout time.Duration // wait for the caches before receiving anyway
	StaticFile  string        // JSON addresses → k8smeta.Meta
	Subnets     *k8smeta.Subnets
}

// Options are what the collector is given besides its Config; tests
// replace them. Nil fields take the real thing.
type Options struct {
	Stdout io.Writer    // printed flows (nil: discarded)
	Logger *slog.Logger // nil: slog.Default()
	// Ready is told the bound addresses before the caches sync.
	Ready func(Addrs)
	// InCluster returns the in-cluster configuration, or
	// rest.ErrNotInCluster outside a pod (nil: rest.InClusterConfig).
	InCluster func() (*rest.Config, error)
	// ReauthorizeEvery is how often --auth kubernetes reviews the token
	// of an open Export stream again (0: DefaultReauthorizeEvery).
	ReauthorizeEvery time.Duration
}

// Addrs are the addresses the collector listens on.
type Addrs struct {
	GRPC    net.Addr // nil with Listen ""
	Metrics net.Addr // nil without a metrics address
	UI      net.Addr // nil without the service map (UI.Listen "", or no history)
}

// ErrConfig marks an error of the Config itself (exit status 2), not of
// the world the collector runs in.
var ErrConfig = errors.New("invalid configuration")

// Collector is one built collector; Run it once.
type Collector struct {
	cfg  Config
	opts Options
	log  *slog.Logger

	cache   *k8smeta.Cache // nil without cluster enrichment
	source  string         // the enrichment's name, for the logs
	metrics *enrich.Metrics
	printer *printer // nil with Output "none"
	srv     *receiver.Server
	auth    *authorizer // nil without --auth kubernetes
	// refusedIdentity counts the flows of another node than their
	// sender's (--auth kubernetes), MetricRefusedFlows{reason="identity"}.
	refusedIdentity atomic.Uint64
	consumer        *receiver.Consumer // nil without Kafka
	hist            *history.Service   // nil with History.Size 0
	capture         *capturerelay.Service
	lis             net.Listener
	ms              *httpserve.Server // nil without a metrics address
	ui              *uiServer         // nil without the service map
	serving         chan struct{}     // closed once agents are served

	stopConsuming context.CancelFunc // nil until the consumer runs
	consumed      chan struct{}      // closed when the consumer returned
}

// New builds the collector: enrichment source, pipeline, receivers,
// metrics, history and printer, and binds its addresses, so that a bad or
// busy one fails now. On error what was built is shut down.
func New(cfg Config, opts Options) (_ *Collector, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	if opts.InCluster == nil {
		opts.InCluster = rest.InClusterConfig
	}
	c := &Collector{cfg: cfg, opts: opts, log: opts.Logger, serving: make(chan struct{}), consumed: make(chan struct{})}
	defer func() {
		if err != nil {
			c.shutdown(context.Background())
		}
	}()
	resolver, err := c.newResolver()
	if err != nil {
		return nil, err
	}
	if err := c.newMetrics(); err != nil {
		return nil, err
	}
	// On c.cfg: newAuth sets Limits.Authorize.
	c.cfg.Limits.Logger = c.log
	if err := c.newAuth(); err != nil {
		return nil, err
	}
	cfg = c.cfg
	if cfg.TLSCert != "" {
		serverTLS := receiver.ServerTLS
		if c.auth != nil {
			// Agents with a token and readers come without a certificate.
			serverTLS = receiver.ServerTLSClientCertOptional
		}
		if cfg.Limits.TLS, err = serverTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA); err != nil {
			return nil, err
		}
		c.cfg.Limits.TLS = cfg.Limits.TLS // the service map's listener serves it too
	}
	pl := &enrich.Pipeline{Resolver: resolver, Metrics: c.metrics}
	if cfg.Output != OutputNone {
		var query flowquery.Query
		if cfg.Print != nil {
			if query, err = flowquery.Compile([]*flowv1.FlowFilter{cfg.Print}); err != nil {
				return nil, fmt.Errorf("%w: the printed flows' query: %w", ErrConfig, err)
			}
		}
		c.printer = newPrinter(opts.Stdout, cfg.Output, query, resolver != nil)
		pl.Sink = c.printer.write
	}
	handle := receiver.Handler(pl.Handle)
	if c.auth != nil {
		handle = c.auth.checkIdentity(handle)
	}
	if c.srv, err = receiver.New(handle, cfg.Limits); err != nil {
		return nil, err
	}
	c.hist = startHistory(cfg.History, pl, c.srv, c.metrics.Registry())
	c.startCapture(resolver)
	if len(cfg.Kafka.Brokers) > 0 {
		cfg.Kafka.MaxFlowsPerBatch, cfg.Kafka.Logger = cfg.Limits.MaxFlowsPerBatch, c.log
		if c.consumer, err = receiver.NewConsumer(pl.Handle, cfg.Kafka); err != nil {
			return nil, err
		}
		c.metrics.Registry().MustRegister(consumerMetrics(&c.consumer.Stats)...)
	}
	var cons *receiver.ConsumerStats
	if c.consumer != nil {
		cons = &c.consumer.Stats
	}
	c.metrics.Registry().MustRegister(refusedMetrics(&c.srv.Stats, cons, &c.refusedIdentity)...)
	c.metrics.Registry().MustRegister(ackMetrics(&c.srv.Stats)...)
	if c.auth != nil {
		c.metrics.Registry().MustRegister(c.auth.metrics()...)
	}
	if err := c.listen(); err != nil {
		return nil, err
	}
	return c, nil
}

// newMetrics builds the registry: the enrichment's flow and health
// metrics, the decode errors of both receivers, the informers' state, and
// the process's own.
func (c *Collector) newMetrics() error {
	mo := c.cfg.Metrics
	mo.DecodeErrors = func() uint64 {
		n := c.srv.Stats.Malformed.Load()
		if c.consumer != nil {
			n += c.consumer.Stats.Malformed.Load()
		}
		return n
	}
	if c.cache != nil {
		mo.Informers = c.cache.Synced
	}
	m, err := enrich.NewMetrics(mo)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	m.Registry().MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		version.NewCollector("flowlens_collector"))
	c.metrics = m
	return nil
}

// listen binds the gRPC and metrics addresses and tells Options.Ready.
func (c *Collector) listen() error {
	var err error
	if c.cfg.Listen != "" {
		if c.lis, err = net.Listen("tcp", c.cfg.Listen); err != nil {
			return err
		}
	}
	if c.cfg.MetricsAddress != "" {
		h := httpserve.Handler(httpserve.Options{Gatherer: c.metrics.Registry(), Ready: c.ready, Logger: c.log})
		if c.ms, err = httpserve.Listen(c.cfg.MetricsAddress, c.cfg.WebConfigFile, h, c.log); err != nil {
			return err
		}
	}
	if err := c.listenUI(); err != nil {
		return err
	}
	if c.opts.Ready != nil {
		var a Addrs
		if c.lis != nil {
			a.GRPC = c.lis.Addr()
		}
		if c.ms != nil {
			a.Metrics = c.ms.Addr()
		}
		if c.ui != nil {
			a.UI = c.ui.lis.Addr()
		}
		c.opts.Ready(a)
	}
	return nil
}

// ready is /readyz: ready once agents are served, after the caches synced
// or Enrichment.SyncTimeout passed. Not gated on the caches beyond that: a
// collector without RBAC for the informers would otherwise never get
// agents through its Service; flowlens_collector_informer_synced says.
func (c *Collector) ready() error {
	select {
	case <-c.serving:
		return nil
	default:
	}
	if c.cache != nil {
		for _, r := range k8smeta.Resources {
			if !c.cache.Synced()[r] {
				return fmt.Errorf("waiting for the Kubernetes caches: %s informer not synced", r)
			}
		}
	}
	return errors.New("starting")
}

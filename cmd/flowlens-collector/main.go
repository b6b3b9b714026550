// Command flowlens-collector receives flows from flowlens agents over gRPC,
// resolves their addresses to Kubernetes context (pod, Service, node,
// owner workload; subnet labels for external addresses), serves Prometheus
// metrics derived from them, and prints them, as JSON lines (the agent's
// field names, plus node_name, agent_ip, src_k8s and dst_k8s) or as a
// one-line-per-flow table, optionally filtered by address, port and
// protocol. It is the reference consumer of the flow API (api/flow/v1),
// built on pkg/collector, internal/pipeline and internal/k8smeta.
//
//	flowlens-collector --listen :9990 --output table --proto tcp --port 443
//	flowlens-agent --export grpc --target collector-host:9990
//
// Enrichment is on when the collector runs in a cluster (service account)
// or is given --kubeconfig; --k8s-enrich=false turns it off. Metrics are on
// --metrics-address (default :9401): see docs/metrics.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flowlens/flowlens/internal/k8smeta"
	"github.com/flowlens/flowlens/internal/pipeline"
	"github.com/flowlens/flowlens/pkg/collector"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil))
}

type options struct {
	listen  string
	output  string
	filter  filter
	tlsCert string
	tlsKey  string
	tlsCA   string
	limits  collector.Options
	grace   time.Duration
	level   slog.Level

	metricsAddr string
	metrics     pipeline.MetricsOptions

	// Enrichment: enrich is the --k8s-enrich value, enrichSet whether it
	// was given (otherwise: on in a cluster or with --kubeconfig).
	enrich      bool
	enrichSet   bool
	kubeconfig  string
	syncTimeout time.Duration
	static      string // --k8s-static file
	subnets     *k8smeta.Subnets
}

// listFlag is a repeatable flag that also takes comma-separated values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("flowlens-collector", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ips, ports, protos, subnets, metrics listFlag
	fs.StringVar(&o.listen, "listen", ":9990", "address to receive flows on (host:port)")
	fs.StringVar(&o.output, "output", "json", "output format: json (one object per line), table (one line per flow) or none (metrics only)")
	fs.Var(&ips, "ip", "only print flows with this source or destination address or CIDR (repeatable; metrics count every flow)")
	fs.Var(&ports, "port", "only print flows with this source or destination port (repeatable)")
	fs.Var(&protos, "proto", "only print flows of this protocol: tcp, udp, icmp, icmpv6, sctp or a number (repeatable)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "server certificate (serve TLS); needs --tls-key")
	fs.StringVar(&o.tlsKey, "tls-key", "", "server key")
	fs.StringVar(&o.tlsCA, "tls-client-ca", "", "CA that agents' client certificates must chain to (mTLS); needs --tls-cert")
	fs.IntVar(&o.limits.MaxMessageBytes, "max-message-bytes", collector.DefaultMaxMessageBytes, "largest message accepted (bytes); larger ones get ResourceExhausted")
	fs.IntVar(&o.limits.MaxFlowsPerBatch, "max-flows-per-batch", collector.DefaultMaxFlowsPerBatch, "most flows accepted in one message")
	fs.IntVar(&o.limits.MaxStreams, "max-agents", collector.DefaultMaxStreams, "most agent streams served at once (-1: unlimited)")
	fs.DurationVar(&o.grace, "shutdown-grace", 10*time.Second, "how long shutdown waits for batches being handled")
	level := fs.String("log-level", "info", "debug, info, warn or error (logs go to stderr)")

	fs.StringVar(&o.metricsAddr, "metrics-address", ":9401", `address serving /metrics, /healthz and /readyz ("" disables)`)
	fs.Var(&metrics, "metrics", "flow metrics to serve, by name with or without the flowlens_collector_ prefix (repeatable; default all; none: only the health metrics); see docs/metrics.md")
	fs.BoolVar(&o.metrics.PodLabels, "pod-labels", false, "add src_pod and dst_pod labels to flow_bytes_total and flow_packets_total (cardinality grows with pods)")
	fs.BoolVar(&o.enrich, "k8s-enrich", false, "resolve addresses to Kubernetes context (default: on in a cluster or with --kubeconfig)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file for enrichment (default: the in-cluster service account)")
	fs.DurationVar(&o.syncTimeout, "k8s-sync-timeout", time.Minute, "how long to wait for the Kubernetes caches before receiving flows anyway")
	fs.StringVar(&o.static, "k8s-static", "", `resolve addresses from this JSON file instead of a cluster: {"10.0.0.1": {"kind": "pod", "namespace": "shop", "name": "web-1", "workload": "web", "workload_kind": "Deployment", "node": "node-a"}, ...}`)
	fs.Var(&subnets, "subnet-labels", "name=CIDR,... labels for addresses outside the cluster (longest prefix wins; repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: flowlens-collector [flags]\n\nReceives flows from flowlens agents (--export grpc --target host:port), enriches them with Kubernetes context, serves Prometheus metrics and prints them on stdout.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "k8s-enrich":
			o.enrichSet = true
		case "metrics":
			o.metrics.Enabled = []string{} // given, even empty: only what it lists
		}
	})
	if o.output != "json" && o.output != "table" && o.output != "none" {
		return nil, fmt.Errorf("--output %q: want json, table or none", o.output)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if o.tlsCA != "" && o.tlsCert == "" {
		return nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	}
	if err := o.level.UnmarshalText([]byte(*level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			return nil, fmt.Errorf("--metrics-address %q: %v", o.metricsAddr, err)
		}
	}
	for _, m := range metrics {
		if m != "none" {
			o.metrics.Enabled = append(o.metrics.Enabled, m)
		}
	}
	if _, err := pipeline.NewMetrics(pipeline.MetricsOptions{Enabled: o.metrics.Enabled}); err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	if o.static != "" && o.enrichSet && !o.enrich {
		return nil, errors.New("--k8s-static needs enrichment: drop --k8s-enrich=false")
	}
	if o.static != "" && o.kubeconfig != "" {
		return nil, errors.New("--k8s-static and --kubeconfig: choose one")
	}
	var err error
	if o.subnets, err = k8smeta.NewSubnets(subnets...); err != nil {
		return nil, fmt.Errorf("--subnet-labels: %w", err)
	}
	if o.filter, err = newFilter(ips, ports, protos); err != nil {
		return nil, err
	}
	return o, nil
}

// addrs are the addresses the collector listens on.
type addrs struct {
	GRPC    net.Addr
	Metrics net.Addr // nil when --metrics-address is ""
}

// env is what tests replace; nil fields take the real thing.
type env struct {
	// ready is told the addresses once the collector listens.
	ready func(addrs)
	// inCluster returns the in-cluster configuration, or
	// rest.ErrNotInCluster outside a pod.
	inCluster func() (*rest.Config, error)
}

// run is main without the process. It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, e *env) int {
	if e == nil {
		e = &env{}
	}
	if e.inCluster == nil {
		e.inCluster = rest.InClusterConfig
	}
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "flowlens-collector: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.level}))
	o.limits.Logger = log
	if o.tlsCert != "" {
		if o.limits.TLS, err = collector.ServerTLS(o.tlsCert, o.tlsKey, o.tlsCA); err != nil {
			log.Error("cannot start", "error", err)
			return 1
		}
	}

	// Enrichment source: a static file, a cluster, or none.
	var source k8smeta.Source
	var cache *k8smeta.Cache
	switch {
	case o.static != "":
		if source, err = loadStatic(o.static); err != nil {
			log.Error("cannot start", "error", err)
			return 1
		}
	default:
		cfg, err := kubeConfig(o, e.inCluster, log)
		if err != nil {
			log.Error("cannot start: Kubernetes enrichment", "error", err)
			return 1
		}
		if cfg != nil {
			client, err := kubernetes.NewForConfig(cfg)
			if err == nil {
				cache, err = k8smeta.NewCache(client)
			}
			if err != nil {
				log.Error("cannot start: Kubernetes enrichment", "error", err)
				return 1
			}
			source = cache
		}
	}
	var resolver *k8smeta.Resolver
	if source != nil || len(o.subnets.Labels()) > 0 {
		resolver = &k8smeta.Resolver{Source: source, Subnets: o.subnets}
	}

	var srv *collector.Server
	o.metrics.DecodeErrors = func() uint64 { return srv.Stats.Malformed.Load() }
	if cache != nil {
		o.metrics.Informers = cache.Synced
	}
	metrics, err := pipeline.NewMetrics(o.metrics)
	if err != nil { // checked by parseFlags
		log.Error("cannot start", "error", err)
		return 2
	}
	metrics.Registry().MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var p *printer
	pl := &pipeline.Pipeline{Resolver: resolver, Metrics: metrics}
	if o.output != "none" {
		p = newPrinter(stdout, o.output, o.filter, resolver != nil)
		pl.Sink = p.write
	}
	if srv, err = collector.New(pl.Handle, o.limits); err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}

	// Bind both addresses first, so that a bad or busy one fails now.
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		log.Error("cannot listen", "error", err)
		return 1
	}
	defer lis.Close()
	var ms *metricsServer
	serving := make(chan struct{})
	// Ready once agents are served: after the caches synced or
	// --k8s-sync-timeout passed. Not gated on the caches beyond that: a
	// collector without RBAC for the informers would otherwise never get
	// agents through its Service; flowlens_collector_informer_synced says.
	ready := func() error {
		select {
		case <-serving:
			return nil
		default:
		}
		if cache != nil {
			for _, r := range k8smeta.Resources {
				if !cache.Synced()[r] {
					return fmt.Errorf("waiting for the Kubernetes caches: %s informer not synced", r)
				}
			}
		}
		return errors.New("starting")
	}
	if o.metricsAddr != "" {
		if ms, err = listenMetrics(o.metricsAddr, metrics.Handler(ready), log); err != nil {
			log.Error("cannot listen", "error", err)
			return 1
		}
	}
	if e.ready != nil {
		a := addrs{GRPC: lis.Addr()}
		if ms != nil {
			a.Metrics = ms.lis.Addr()
		}
		e.ready(a)
	}

	if cache != nil {
		cache.Start()
		defer cache.Stop()
		sctx, cancel := context.WithTimeout(ctx, o.syncTimeout)
		synced := cache.WaitForSync(sctx)
		cancel()
		switch {
		case ctx.Err() != nil:
		case synced:
			log.Info("Kubernetes caches synced", "resources", strings.Join(k8smeta.Resources, ","))
		default:
			log.Warn("Kubernetes caches not synced: receiving flows anyway, enriched with what is cached (see flowlens_collector_informer_synced)",
				"after", o.syncTimeout, "synced", fmt.Sprint(cache.Synced()))
		}
	}

	log.Info("receiving flows", "address", lis.Addr().String(), "tls", o.tlsCert != "", "mtls", o.tlsCA != "", "output", o.output,
		"metrics", o.metricsAddr, "enrichment", enrichmentName(o, cache), "subnets", o.subnets.String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	close(serving)

	code := 0
	select {
	case <-ctx.Done():
	case err := <-served:
		log.Error("server stopped", "error", err)
		code = 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown: some batches were not handled", "error", err)
	}
	printed := uint64(0)
	if p != nil {
		if err := p.flush(); err != nil {
			log.Error("writing output", "error", err)
			code = 1
		}
		printed = p.printed.Load()
	}
	if ms != nil {
		if err := ms.shutdown(sctx); err != nil {
			log.Warn("metrics server shutdown", "error", err)
		}
	}
	st := &srv.Stats
	log.Info("stopped", "streams", st.StreamsTotal.Load(), "batches", st.Batches.Load(), "flows", st.Flows.Load(),
		"printed", printed, "rejected", st.Rejected.Load())
	return code
}

func enrichmentName(o *options, cache *k8smeta.Cache) string {
	switch {
	case o.static != "":
		return "static:" + o.static
	case cache != nil && o.kubeconfig != "":
		return "kubeconfig:" + o.kubeconfig
	case cache != nil:
		return "cluster"
	}
	return "off"
}

// kubeConfig decides whether to enrich from a cluster and returns its
// configuration (nil: no enrichment). Default: on in a cluster or with
// --kubeconfig. --k8s-enrich=true without either falls back to client-go's
// usual kubeconfig search ($KUBECONFIG, ~/.kube/config).
func kubeConfig(o *options, inCluster func() (*rest.Config, error), log *slog.Logger) (*rest.Config, error) {
	if o.enrichSet && !o.enrich {
		return nil, nil
	}
	var cfg *rest.Config
	var err error
	switch {
	case o.kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	default:
		cfg, err = inCluster()
		if errors.Is(err, rest.ErrNotInCluster) {
			if !o.enrichSet {
				return nil, nil // outside a cluster, not asked: off
			}
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		} else if err != nil && !o.enrichSet {
			// In a pod without a usable service account token: run
			// without enrichment rather than not at all.
			log.Warn("running in a cluster without credentials: Kubernetes enrichment off", "error", err)
			return nil, nil
		}
	}
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "flowlens-collector"
	// Protobuf is smaller and cheaper to decode than JSON for the
	// informers' lists and watches.
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.ContentType = runtime.ContentTypeProtobuf
	return cfg, nil
}

// loadStatic reads a --k8s-static file: a JSON object from addresses to
// contexts (k8smeta.Meta's JSON fields).
func loadStatic(file string) (k8smeta.StaticSource, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--k8s-static: %w", err)
	}
	var raw map[string]k8smeta.Meta
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("--k8s-static %s: %w", file, err)
	}
	out := make(k8smeta.StaticSource, len(raw))
	for ip, m := range raw {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, fmt.Errorf("--k8s-static %s: %q is not an address", file, ip)
		}
		switch m.Kind {
		case k8smeta.KindPod, k8smeta.KindService, k8smeta.KindNode:
		default:
			return nil, fmt.Errorf("--k8s-static %s: %s: kind %q, want pod, service or node", file, ip, m.Kind)
		}
		out[a.Unmap()] = m
	}
	return out, nil
}

// metricsServer serves /metrics, /healthz and /readyz.
type metricsServer struct {
	srv  *http.Server
	lis  net.Listener
	done chan error
}

func listenMetrics(addr string, h http.Handler, log *slog.Logger) (*metricsServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	s := &metricsServer{lis: lis, done: make(chan error, 1), srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}
	go func() {
		err := s.srv.Serve(lis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			log.Error("metrics server stopped", "error", err)
		}
		s.done <- err
	}()
	return s, nil
}

func (s *metricsServer) shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	return errors.Join(err, <-s.done)
}

// protoNames maps --proto names to IP protocol numbers, and back for the table.
var protoNames = map[string]uint32{"icmp": 1, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "icmpv6": 58, "sctp": 132}

func protoName(p uint32) string {
	for n, v := range protoNames {
		if v == p {
			return n
		}
	}
	return strconv.FormatUint(uint64(p), 10)
}

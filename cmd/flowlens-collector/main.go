// Command flowlens-collector receives flows from flowlens agents over gRPC,
// resolves their addresses to Kubernetes context (pod, Service, node,
// owner workload; subnet labels for external addresses), serves Prometheus
// metrics derived from them, and prints them, as JSON lines (the agent's
// field names, plus node_name, agent_ip, src_k8s and dst_k8s) or as a
// one-line-per-flow table, optionally filtered by address, port and
// protocol. It is the reference consumer of the flow API (api/flow/v1),
// built on pkg/receiver, internal/collector/enrich and internal/collector/k8smeta.
//
//	flowlens-collector --listen :9990 --output table --proto tcp --port 443
//	flowlens-agent --export grpc --target collector-host:9990
//
// Enrichment is on when the collector runs in a cluster (service account)
// or is given --kubeconfig; --k8s-enrich=false turns it off. Metrics are on
// --metrics-address (default :9401), over TLS with --web-config-file: see
// docs/metrics.md.
//
// Every flag can also be set with a FLOWLENS_COLLECTOR_<NAME> environment
// variable (FLOWLENS_COLLECTOR_MAX_AGENTS for --max-agents) or in a YAML
// file given by --config or FLOWLENS_COLLECTOR_CONFIG (key max_agents);
// flags win over the environment, which wins over the file. --help lists
// the flags, --version prints the version. A bad setting exits with status
// 2 and a message naming the flag.
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
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/httpserve"
	"github.com/flowlens/flowlens/internal/shared/version"
	"github.com/flowlens/flowlens/pkg/receiver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil))
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
	// getenv looks up the FLOWLENS_COLLECTOR_* variables (nil: os.Getenv).
	getenv func(string) string
}

// run is main without the process. It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, e *env) int {
	if e == nil {
		e = &env{}
	}
	if e.inCluster == nil {
		e.inCluster = rest.InClusterConfig
	}
	if e.getenv == nil {
		e.getenv = os.Getenv
	}
	o, err := parseFlags(args, e.getenv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		spec.Usage(stdout)
		return 0
	case errors.Is(err, cliconf.ErrVersion):
		fmt.Fprintln(stdout, version.String("flowlens-collector"))
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "flowlens-collector: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.level}))
	o.limits.Logger = log
	if o.tlsCert != "" {
		if o.limits.TLS, err = receiver.ServerTLS(o.tlsCert, o.tlsKey, o.tlsCA); err != nil {
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

	var srv *receiver.Server
	var consumer *receiver.Consumer
	o.metrics.DecodeErrors = func() uint64 {
		n := srv.Stats.Malformed.Load()
		if consumer != nil {
			n += consumer.Stats.Malformed.Load()
		}
		return n
	}
	if cache != nil {
		o.metrics.Informers = cache.Synced
	}
	metrics, err := enrich.NewMetrics(o.metrics)
	if err != nil { // names checked by parseFlags
		log.Error("cannot start", "error", err)
		return 2
	}
	metrics.Registry().MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		version.NewCollector("flowlens_collector"))

	var p *printer
	pl := &enrich.Pipeline{Resolver: resolver, Metrics: metrics}
	if o.output != "none" {
		p = newPrinter(stdout, o.output, o.filter, resolver != nil)
		pl.Sink = p.write
	}
	if srv, err = receiver.New(pl.Handle, o.limits); err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	hist := startHistory(o.history, pl, srv, metrics.Registry())
	if len(o.kafka.Brokers) > 0 {
		o.kafka.MaxFlowsPerBatch, o.kafka.Logger = o.limits.MaxFlowsPerBatch, log
		if consumer, err = receiver.NewConsumer(pl.Handle, o.kafka); err != nil {
			log.Error("cannot start", "error", err)
			return 1
		}
		metrics.Registry().MustRegister(consumerMetrics(&consumer.Stats)...)
	}

	// Bind both addresses first, so that a bad or busy one fails now.
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		log.Error("cannot listen", "error", err)
		return 1
	}
	defer lis.Close()
	var ms *httpserve.Server
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
		h := httpserve.Handler(httpserve.Options{Gatherer: metrics.Registry(), Ready: ready, Logger: log})
		if ms, err = httpserve.Listen(o.metricsAddr, o.webConfig, h, log); err != nil {
			log.Error("cannot listen", "error", err)
			return 1
		}
	}
	if e.ready != nil {
		a := addrs{GRPC: lis.Addr()}
		if ms != nil {
			a.Metrics = ms.Addr()
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
		"metrics", o.metricsAddr, "history", o.history.size, "enrichment", enrichmentName(o, cache), "subnets", o.subnets.String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	consumed := make(chan struct{})
	consumeCtx, stopConsuming := context.WithCancel(context.Background())
	defer stopConsuming()
	if consumer != nil {
		log.Info("consuming flows from Kafka", "brokers", strings.Join(o.kafka.Brokers, ","), "topic", o.kafka.Topic, "group", o.kafka.Group)
		go func() { consumer.Run(consumeCtx); close(consumed) }()
	} else {
		close(consumed)
	}
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
	if hist != nil {
		hist.Close() // ends the observers' follow streams, which a graceful stop would wait for
	}
	// The consumer commits what it handled and leaves its group.
	stopConsuming()
	select {
	case <-consumed:
	case <-sctx.Done():
		log.Warn("shutdown: the Kafka consumer did not stop in time")
	}
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
		if err := ms.Shutdown(sctx); err != nil {
			log.Warn("metrics server shutdown", "error", err)
		}
	}
	st := &srv.Stats
	log.Info("stopped", "streams", st.StreamsTotal.Load(), "batches", st.Batches.Load(), "flows", st.Flows.Load(),
		"printed", printed, "rejected", st.Rejected.Load())
	if consumer != nil {
		cs := &consumer.Stats
		log.Info("stopped consuming", "records", cs.Records.Load(), "flows", cs.Flows.Load(), "malformed", cs.Malformed.Load(),
			"handler_errors", cs.HandlerErrors.Load(), "commit_errors", cs.CommitErrors.Load())
	}
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
// contexts (enriched.K8sContext's JSON fields).
func loadStatic(file string) (k8smeta.StaticSource, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--k8s-static: %w", err)
	}
	var raw map[string]enriched.K8sContext
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
		case enriched.KindPod, enriched.KindService, enriched.KindNode:
		default:
			return nil, fmt.Errorf("--k8s-static %s: %s: kind %q, want pod, service or node", file, ip, m.Kind)
		}
		out[a.Unmap()] = m
	}
	return out, nil
}

// protoNames maps --proto names to IP protocol numbers.
var protoNames = map[string]uint32{"icmp": 1, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "icmpv6": 58, "sctp": 132}

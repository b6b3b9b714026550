// Command flowlens-collector receives flows from flowlens agents over gRPC
// and prints them, as JSON lines (the agent's field names, plus node_name
// and agent_ip) or as a one-line-per-flow table, optionally filtered by
// address, port and protocol. It is the reference consumer of the flow API
// (api/flow/v1) and is built on pkg/collector.
//
//	flowlens-collector --listen :9990 --output table --proto tcp --port 443
//	flowlens-agent --export grpc --target collector-host:9990
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

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
	var ips, ports, protos listFlag
	fs.StringVar(&o.listen, "listen", ":9990", "address to receive flows on (host:port)")
	fs.StringVar(&o.output, "output", "json", "output format: json (one object per line) or table (one line per flow)")
	fs.Var(&ips, "ip", "only flows with this source or destination address or CIDR (repeatable)")
	fs.Var(&ports, "port", "only flows with this source or destination port (repeatable)")
	fs.Var(&protos, "proto", "only flows of this protocol: tcp, udp, icmp, icmpv6, sctp or a number (repeatable)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "server certificate (serve TLS); needs --tls-key")
	fs.StringVar(&o.tlsKey, "tls-key", "", "server key")
	fs.StringVar(&o.tlsCA, "tls-client-ca", "", "CA that agents' client certificates must chain to (mTLS); needs --tls-cert")
	fs.IntVar(&o.limits.MaxMessageBytes, "max-message-bytes", collector.DefaultMaxMessageBytes, "largest message accepted (bytes); larger ones get ResourceExhausted")
	fs.IntVar(&o.limits.MaxFlowsPerBatch, "max-flows-per-batch", collector.DefaultMaxFlowsPerBatch, "most flows accepted in one message")
	fs.IntVar(&o.limits.MaxStreams, "max-agents", collector.DefaultMaxStreams, "most agent streams served at once (-1: unlimited)")
	fs.DurationVar(&o.grace, "shutdown-grace", 10*time.Second, "how long shutdown waits for batches being handled")
	level := fs.String("log-level", "info", "debug, info, warn or error (logs go to stderr)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: flowlens-collector [flags]\n\nReceives flows from flowlens agents (--export grpc --target host:port) and prints them on stdout.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.output != "json" && o.output != "table" {
		return nil, fmt.Errorf("--output %q: want json or table", o.output)
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
	var err error
	if o.filter, err = newFilter(ips, ports, protos); err != nil {
		return nil, err
	}
	return o, nil
}

// run is main without the process: ready, when set, is told the address
// once the server listens. It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(net.Addr)) int {
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
	p := newPrinter(stdout, o.output, o.filter)
	srv, err := collector.New(p.handle, o.limits)
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		log.Error("cannot listen", "error", err)
		return 1
	}
	log.Info("receiving flows", "address", lis.Addr().String(), "tls", o.tlsCert != "", "mtls", o.tlsCA != "", "output", o.output)
	if ready != nil {
		ready(lis.Addr())
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

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
	if err := p.flush(); err != nil {
		log.Error("writing output", "error", err)
		code = 1
	}
	st := &srv.Stats
	log.Info("stopped", "streams", st.StreamsTotal.Load(), "batches", st.Batches.Load(), "flows", st.Flows.Load(),
		"printed", p.printed.Load(), "rejected", st.Rejected.Load())
	return code
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

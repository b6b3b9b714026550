package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/flowlens/flowlens/pkg/tlsclient"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/flowtable"
	"github.com/flowlens/flowlens/internal/history"
	"github.com/flowlens/flowlens/internal/pipeline"
)

// observe is the observe subcommand. It returns the exit code.
func observe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseObserve(args, nowFunc())
	switch {
	case errors.Is(err, errHelp):
		printUsage(stdout)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "flowlens observe: %v\n", err)
		return 2
	}
	servers := o.servers
	serverName := o.serverName
	if len(servers) == 0 {
		fwd, err := forwardCollectors(ctx, o, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "flowlens observe: %v\n", err)
			return 1
		}
		defer fwd.close()
		servers = fwd.addrs
		if serverName == "" {
			serverName = "flowlens-collector." + o.namespace + ".svc"
		}
	}
	creds, err := clientCredentials(o, serverName)
	if err != nil {
		fmt.Fprintf(stderr, "flowlens observe: %v\n", err)
		return 1
	}
	w := bufio.NewWriterSize(stdout, 64<<10)
	p := &printer{o: o, w: w}
	err = query(ctx, o, servers, creds, p, stderr)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "flowlens observe: %v\n", err)
		return 1
	}
	return 0
}

// request is o's GetFlowsRequest.
func (o *options) request() *flowv1.GetFlowsRequest {
	req := &flowv1.GetFlowsRequest{Filters: o.filters, Last: o.last, Follow: o.follow}
	if o.follow && !o.lastSet && o.since.IsZero() {
		req.SkipHistory = true
	}
	if !o.since.IsZero() {
		req.Since = timestamppb.New(o.since)
	}
	if !o.until.IsZero() {
		req.Until = timestamppb.New(o.until)
	}
	return req
}

// item is what one collector's stream yields: a flow, the end of its
// history, or its end (err, nil at a normal end).
type item struct {
	server  string
	flow    *flowv1.HistoryFlow
	histEnd bool
	lost    uint64
	done    bool
	err     error
}

// query asks every server, prints their histories merged by end time (the
// last N of all of them), then, with --follow, their new flows as they
// come. Lost flows (a follower too slow) are reported on stderr.
func query(ctx context.Context, o *options, servers []string, creds credentials.TransportCredentials, p *printer, stderr io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan item, 1024)
	var wg sync.WaitGroup
	for _, s := range servers {
		conn, err := grpc.NewClient(s, grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
		if err != nil {
			return fmt.Errorf("%s: %v", s, err)
		}
		defer conn.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream(ctx, s, flowv1.NewFlowHistoryClient(conn), o.request(), items)
		}()
	}
	go func() { wg.Wait(); close(items) }()

	// The histories: until every server has sent its end (or finished).
	var past []*flowv1.HistoryFlow
	pending := len(servers)
	var errs []error
	for pending > 0 {
		it, ok := <-items
		if !ok {
			break
		}
		switch {
		case it.lost > 0:
			reportLost(stderr, it)
		case it.flow != nil:
			past = append(past, it.flow)
		case it.histEnd, it.done:
			pending--
			if it.err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", it.server, it.err))
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	slices.SortStableFunc(past, func(a, b *flowv1.HistoryFlow) int {
		return a.Flow.EndTime.AsTime().Compare(b.Flow.EndTime.AsTime())
	})
	if n := o.last; n > 0 && uint64(len(past)) > n {
		past = past[uint64(len(past))-n:]
	}
	if err := p.history(past); err != nil {
		return err
	}
	if !o.follow {
		return nil
	}
	for it := range items {
		switch {
		case it.lost > 0:
			reportLost(stderr, it)
		case it.flow != nil:
			if err := p.print(it.flow); err != nil {
				return err
			}
		case it.done:
			if it.err != nil && ctx.Err() == nil {
				return fmt.Errorf("%s: %w", it.server, it.err)
			}
		}
	}
	return nil
}

func reportLost(stderr io.Writer, it item) {
	fmt.Fprintf(stderr, "flowlens observe: %s: %d flows lost: this client read more slowly than they arrived\n", it.server, it.lost)
}

// stream reads one collector's answer into items.
func stream(ctx context.Context, server string, c flowv1.FlowHistoryClient, req *flowv1.GetFlowsRequest, items chan<- item) {
	send := func(it item) bool {
		it.server = server
		select {
		case items <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	st, err := c.GetFlows(ctx, req)
	if err != nil {
		send(item{done: true, err: err})
		return
	}
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			send(item{done: true})
			return
		}
		if err != nil {
			send(item{done: true, err: err})
			return
		}
		switch x := r.Response.(type) {
		case *flowv1.GetFlowsResponse_Flow:
			if !send(item{flow: x.Flow}) {
				return
			}
		case *flowv1.GetFlowsResponse_HistoryEnd:
			if !send(item{histEnd: true}) {
				return
			}
		case *flowv1.GetFlowsResponse_Lost:
			if !send(item{lost: x.Lost}) {
				return
			}
		}
	}
}

// printer writes flows in the --output format.
type printer struct {
	o     *options
	w     *bufio.Writer
	table *flowtable.Table
	buf   []byte
}

var jsonpb = protojson.MarshalOptions{UseProtoNames: true}

// history prints the flows of the histories; a table fits its columns to
// them and prints its header.
func (p *printer) history(flows []*flowv1.HistoryFlow) error {
	if p.o.output == "table" {
		enriched := false
		decoded := make([]pipeline.Flow, len(flows))
		for i, h := range flows {
			f, err := history.FromProto(h)
			if err != nil {
				return err
			}
			decoded[i] = f
			enriched = enriched || f.Enriched
		}
		// Without a flow to tell, assume the collector enriches (in a
		// cluster it does).
		p.table = flowtable.NewTable(true, enriched || len(flows) == 0)
		for i := range decoded {
			p.table.Widen(&decoded[i])
		}
		p.w.Write(append(p.table.AppendHeader(p.buf[:0]), '\n'))
	}
	for _, h := range flows {
		if err := p.print(h); err != nil {
			return err
		}
	}
	return p.w.Flush()
}

// print writes one flow and flushes when following.
func (p *printer) print(h *flowv1.HistoryFlow) error {
	b := p.buf[:0]
	if p.o.output == "jsonpb" {
		js, err := jsonpb.Marshal(h)
		if err != nil {
			return err
		}
		b = append(b, js...)
	} else {
		f, err := history.FromProto(h)
		if err != nil {
			return err
		}
		switch p.o.output {
		case "json":
			b = f.AppendJSON(b)
		case "compact":
			b = flowtable.AppendCompact(b, &f)
		default:
			b = p.table.AppendRow(b, &f)
		}
	}
	p.buf = append(b, '\n')
	if _, err := p.w.Write(p.buf); err != nil {
		return err
	}
	if p.o.follow {
		return p.w.Flush()
	}
	return nil
}

// clientCredentials are plaintext, TLS (--tls-ca) or mTLS (and --tls-cert,
// --tls-key), like the agent's gRPC exporter.
func clientCredentials(o *options, serverName string) (credentials.TransportCredentials, error) {
	if o.tlsCA == "" && o.tlsCert == "" {
		return insecure.NewCredentials(), nil
	}
	tc, err := tlsclient.Config(o.tlsCA, o.tlsCert, o.tlsKey, serverName)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca/--tls-cert/--tls-key: %w", err)
	}
	return credentials.NewTLS(tc), nil
}

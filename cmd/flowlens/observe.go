package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/client-go/rest"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/textfmt"
)

// observe is the observe subcommand: env looks up its FLOWLENS_OBSERVE_*
// variables. It returns the exit code.
func observe(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	o, code, done := loadOptions(observeSpec, "observe", args, env, stdout, stderr)
	if done {
		return code
	}
	servers := o.servers
	serverName := o.serverName
	var kube *rest.Config
	var pods map[string]string
	if len(servers) == 0 {
		fwd, err := forwardCollectors(ctx, o, grpcPort, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "flowlens observe: %v\n", err)
			return 1
		}
		defer fwd.close()
		servers, kube, pods = fwd.addrs, fwd.kube, fwd.pods
		if serverName == "" {
			serverName = "flowlens-collector." + o.namespace + ".svc"
		}
	}
	conn, err := connect(ctx, o, serverName, kube)
	if err != nil {
		fmt.Fprintf(stderr, "flowlens observe: %v\n", err)
		return 1
	}
	conn.names = pods
	w := bufio.NewWriterSize(stdout, 64<<10)
	p := &printer{o: o, w: w}
	err = query(ctx, o, servers, conn, p, stderr)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if err != nil && ctx.Err() == nil {
		// A collector's error text is not trusted: escaped like its flows.
		fmt.Fprintf(stderr, "flowlens observe: %s\n", textfmt.Safe(err.Error()))
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
// history, a loss report, or its end (err, nil at a normal end).
type item struct {
	stream  int // the server's index
	server  string
	flow    *flowv1.HistoryFlow
	histEnd bool
	lost    uint64
	done    bool
	err     error
}

// query asks every server and prints their answers (answer).
func query(ctx context.Context, o *options, servers []string, c *connection, p *printer, stderr io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan item, 1024)
	var wg sync.WaitGroup
	for i, s := range servers {
		conn, err := grpc.NewClient(s, append(c.opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))...)
		if err != nil {
			return fmt.Errorf("%s: %v", s, err)
		}
		defer conn.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := s
			if n, ok := c.names[s]; ok {
				name = n
			}
			stream(ctx, i, name, flowv1.NewFlowHistoryClient(conn), o.request(), items)
		}()
	}
	go func() { wg.Wait(); close(items) }()
	return answer(ctx, o, len(servers), items, p, c, stderr)
}

// answer prints what the streams send on items: their histories merged by
// end time (the last N of all of them), then, with --follow, their new
// flows merged by the same time (follow). Lost flows (a follower too slow)
// are reported on stderr.
func answer(ctx context.Context, o *options, streams int, items <-chan item, p *printer, c *connection, stderr io.Writer) error {
	m := newMerger(streams, o.reorderWindow, reorderLimit)
	// The histories: until every stream has sent its end (or finished). A
	// stream's flows after its end are new ones, while the others may
	// still send their histories: they wait in m, so that --last counts
	// history flows only, and none is printed twice or not at all.
	var past []*flowv1.HistoryFlow
	inHistory := make([]bool, streams)
	for i := range inHistory {
		inHistory[i] = true
	}
	pending := streams
	var errs []error
	for pending > 0 {
		it, ok := <-items
		if !ok {
			break
		}
		switch {
		case it.lost > 0:
			reportLost(stderr, it)
		case it.flow != nil && inHistory[it.stream]:
			past = append(past, it.flow)
		case it.flow != nil:
			m.add(it.stream, it.flow, time.Now())
		case it.histEnd:
			inHistory[it.stream] = false
			pending--
		case it.done:
			if inHistory[it.stream] {
				inHistory[it.stream] = false
				pending--
			}
			m.end(it.stream)
			if it.err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", it.server, c.explain(it.err)))
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
	return follow(ctx, m, items, p, stderr)
}

func reportLost(stderr io.Writer, it item) {
	fmt.Fprintf(stderr, "flowlens observe: %s: %d flows lost: this client read more slowly than they arrived\n", it.server, it.lost)
}

// stream reads one collector's answer into items.
func stream(ctx context.Context, i int, server string, c flowv1.FlowHistoryClient, req *flowv1.GetFlowsRequest, items chan<- item) {
	send := func(it item) bool {
		it.stream, it.server = i, server
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
	table *textfmt.Table
	buf   []byte
}

var jsonpb = protojson.MarshalOptions{UseProtoNames: true}

// history prints the flows of the histories; a table fits its columns to
// them and prints its header.
func (p *printer) history(flows []*flowv1.HistoryFlow) error {
	if p.o.output == "table" {
		anyEnriched := false
		decoded := make([]enriched.Flow, len(flows))
		for i, h := range flows {
			f, err := enriched.FromProto(h)
			if err != nil {
				return err
			}
			decoded[i] = f
			anyEnriched = anyEnriched || f.Enriched
		}
		// Without a flow to tell, assume the collector enriches (in a
		// cluster it does).
		p.table = textfmt.NewTable(true, anyEnriched || len(flows) == 0)
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

// print writes one flow (follow flushes after each round).
func (p *printer) print(h *flowv1.HistoryFlow) error {
	b := p.buf[:0]
	if p.o.output == "jsonpb" {
		js, err := jsonpb.Marshal(h)
		if err != nil {
			return err
		}
		b = textfmt.SafeJSON(b, js) // protojson leaves C1, U+2028, bidi controls raw
	} else {
		f, err := enriched.FromProto(h)
		if err != nil {
			return err
		}
		switch p.o.output {
		case "json":
			b = f.AppendJSON(b)
		case "compact":
			b = textfmt.AppendCompact(b, &f)
		default:
			b = p.table.AppendRow(b, &f)
		}
	}
	p.buf = append(b, '\n')
	_, err := p.w.Write(p.buf)
	return err
}

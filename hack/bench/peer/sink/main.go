// Command sink is the flow collector NetObserv's agent exports to in
// `make bench-live PEER=1` (hack/bench/live, side-by-side mode): it serves
// NetObserv's pbflow Collector gRPC service (`Send(Records)`, the service of
// the pinned agent's proto/flow.proto) and only sums what it receives:
// records, their packets and bytes (Record fields 9 and 8), batches, and the
// entries of the records' dup_list (the interfaces a flow was also seen on).
//
//	sink -listen 127.0.0.1:9910 -out totals.json
//
// The totals are written to -out (JSON, replaced atomically) at most every
// 100 ms while they change, and once more on SIGTERM or SIGINT, after which
// the sink exits; the driver reads the file to know when the agent's last
// eviction has arrived and what it exported. It runs in the network
// namespace of the agent it serves (the agent exports to loopback).
//
// flowlens' counterpart, with the same totals file, is the driver's own
// -flowlens-sink mode (flowlens' gRPC export has another service).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/netobserv/netobserv-ebpf-agent/pkg/pbflow"
	"google.golang.org/grpc"
)

// totals is the file's content; hack/bench/live reads the same fields.
type totals struct {
	Records   uint64  `json:"records"`
	Packets   uint64  `json:"packets"`
	Bytes     uint64  `json:"bytes"`
	Batches   uint64  `json:"batches"`
	DupList   uint64  `json:"dup_list_entries"`
	LastBatch float64 `json:"last_batch_unix"` // when the last batch arrived (s since the epoch)
	Final     bool    `json:"final"`           // written at exit
}

type sink struct {
	pbflow.UnimplementedCollectorServer
	mu      sync.Mutex
	t       totals
	changed bool
}

func (s *sink) Send(_ context.Context, r *pbflow.Records) (*pbflow.CollectorReply, error) {
	var recs, pkts, bytes, dups uint64
	for _, e := range r.GetEntries() {
		recs++
		pkts += e.GetPackets()
		bytes += e.GetBytes()
		dups += uint64(len(e.GetDupList()))
	}
	s.mu.Lock()
	s.t.Records += recs
	s.t.Packets += pkts
	s.t.Bytes += bytes
	s.t.DupList += dups
	s.t.Batches++
	s.t.LastBatch = float64(time.Now().UnixNano()) / 1e9
	s.changed = true
	s.mu.Unlock()
	return &pbflow.CollectorReply{}, nil
}

// write replaces path with the totals (rename: a reader never sees half a file).
func (s *sink) write(path string, final bool) error {
	s.mu.Lock()
	t := s.t
	t.Final = final
	s.changed = false
	s.mu.Unlock()
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9910", "address to serve pbflow.Collector on")
	out := flag.String("out", "", "totals file (JSON), rewritten while they change and at exit")
	flag.Parse()
	if err := run(*listen, *out); err != nil {
		fmt.Fprintln(os.Stderr, "sink:", err)
		os.Exit(1)
	}
}

func run(listen, out string) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	s := &sink{}
	if err := s.write(out, false); err != nil {
		return err
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	// NetObserv sends up to GRPC_MESSAGE_MAX_FLOWS (10 000) records a message.
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(256 << 20))
	pbflow.RegisterCollectorServer(srv, s)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			return err
		case <-sigs:
			srv.Stop()
			return s.write(out, true)
		case <-tick.C:
			s.mu.Lock()
			changed := s.changed
			s.mu.Unlock()
			if changed {
				if err := s.write(out, false); err != nil {
					return err
				}
			}
		}
	}
}

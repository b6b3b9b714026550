package otlp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/agent/exporter/otlp"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/flow"
)

// TestShutdownWithStuckReceiver: the agent's shutdown of an OTLP exporter
// whose peer takes the connection and never answers, with batches
// buffered: one in the Export waiting for its answer, the queue full
// behind it. The peer is the Collector's OTLP receiver whose pipeline
// never returns (over gRPC and HTTP: the request is read, the answer never
// comes), or a TCP listener that accepts and never reads (gRPC: the
// HTTP/2 handshake never ends). Fanout.Close, as the agent calls it,
// returns within the exporter's budget (config.ExportShutdownBudget, then
// config.ExportCloseGrace for its Close) without leaving the exporter
// behind, and every flow is counted once: the Export's batch failed
// (export_failed_flows_total), the queued ones lost at shutdown
// (export_dropped_flows_total{reason="shutdown"}); the receiver delivered
// none of them.
func TestShutdownWithStuckReceiver(t *testing.T) {
	for _, tc := range []struct {
		name, protocol string
		peer           func(t *testing.T) (addr string, delivered func() int)
	}{
		{"grpc-receiver-never-answers", "grpc", stuckReceiver("grpc")},
		{"http-receiver-never-answers", "http", stuckReceiver("http")},
		{"grpc-listener-never-reads", "grpc", silentListener},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const per, queued = 50, 3
			addr, delivered := tc.peer(t)
			e := newExporter(t, otlp.Config{Endpoint: addr, Protocol: tc.protocol})
			q := exporter.NewQueue(e, queued, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go q.Run(ctx)

			batch := func() *flow.Batch {
				recs := make([]flow.Record, per)
				for i := range recs {
					recs[i] = records()[0]
				}
				return flow.BatchOf(recs)
			}
			q.Push(batch(), time.Now())
			for deadline := time.Now().Add(10 * time.Second); q.Len() > 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the Export never took the first batch")
				}
			}
			for range queued {
				q.Push(batch(), time.Now())
			}
			if q.Len() != queued {
				t.Fatalf("%d batches queued, want %d", q.Len(), queued)
			}

			start := time.Now()
			err := exporter.Fanout{q}.Close(config.ExportShutdownBudget)
			took := time.Since(start)
			t.Logf("Close returned after %v (budget %v + close grace %v)", took.Round(time.Millisecond),
				config.ExportShutdownBudget, config.ExportCloseGrace)
			if err != nil {
				t.Errorf("Close: %v", err)
			}
			if limit := config.ExportShutdownBudget + config.ExportCloseGrace; took > limit {
				t.Errorf("Close took %v, over the exporter's budget %v", took, limit)
			}
			failed, lost, acked := e.Stats.FailedFlows.Load(), q.Stats.ShutdownFlows.Load(), e.Stats.AckedFlows.Load()
			t.Logf("given %d: failed %d, lost at shutdown %d, acked %d, delivered %d",
				(queued+1)*per, failed, lost, acked, delivered())
			if failed != per || lost != queued*per || acked != 0 || delivered() != 0 {
				t.Errorf("failed %d, lost at shutdown %d, acked %d, delivered %d; want %d, %d, 0, 0",
					failed, lost, acked, delivered(), per, queued*per)
			}
		})
	}
}

// stuckReceiver is the Collector's OTLP receiver on protocol whose
// pipeline never returns (until the test ends): it reads every request
// and answers none. delivered is what its pipeline completed: none.
func stuckReceiver(protocol string) func(t *testing.T) (string, func() int) {
	return func(t *testing.T) (string, func() int) {
		release := make(chan struct{})
		var mu sync.Mutex
		done := 0
		next, err := consumer.NewLogs(func(ctx context.Context, ld plog.Logs) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			mu.Lock()
			done += ld.LogRecordCount()
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		r := startReceiver(t, protocol, testkit.FreeAddr(t), nil, next)
		t.Cleanup(func() { close(release) }) // before the receiver's stop, which waits for its requests
		return r.addr, func() int { mu.Lock(); defer mu.Unlock(); return done }
	}
}

// silentListener takes connections and never reads them; it delivers
// nothing.
func silentListener(t *testing.T) (string, func() int) {
	return testkit.SilentListener(t), func() int { return 0 }
}

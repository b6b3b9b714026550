package kafka_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/agent/exporter/kafka"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
)

// TestShutdownWithStuckBroker: the agent's shutdown of a Kafka exporter
// whose broker is stuck (SIGSTOP: its connections open, nothing answered)
// with batches buffered: one in the Export waiting for its acks, the
// queue full behind it. Fanout.Close, as the agent calls it, returns
// within the exporter's budget (config.ExportShutdownBudget, then
// config.ExportCloseGrace for the exporter's Close) without leaving the
// exporter behind, and every flow is counted once: the batch the Export
// held in export_failed_flows_total, the queued ones in
// export_dropped_flows_total{reason="shutdown"}. Resumed, the broker holds
// exactly the flows acknowledged before: the flows counted lost are the
// flows not delivered.
func TestShutdownWithStuckBroker(t *testing.T) {
	const (
		perBatch = 100
		queued   = 8 // the queue's capacity: --export-buffer's default
	)
	b := kafkatest.Start(t)
	b.CreateTopic("stuck", 4)
	e, err := kafka.New(kafka.Config{Conn: flowkafka.Conn{Brokers: []string{b.Addr}}, Topic: "stuck",
		NodeName: node, AgentIP: agentIP})
	if err != nil {
		t.Fatal(err)
	}
	q := exporter.NewQueue(e, queued, slog.New(slog.DiscardHandler))
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	go q.Run(runCtx)

	recs := records((queued + 2) * perBatch)
	batch := func(i int) *flow.Batch {
		rs := make([]flow.Record, perBatch)
		copy(rs, recs[i*perBatch:])
		return flow.BatchOf(rs)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	// A first batch acknowledged: the topic's partitions are known.
	q.Push(batch(0), time.Now().Add(time.Second))
	waitFor("the first batch's acks", func() bool { return e.Stats.AckedFlows.Load() == perBatch })

	b.Pause()
	defer b.Resume() // the cleanup kills it either way
	q.Push(batch(1), time.Now().Add(time.Second))
	waitFor("the Export to take the batch", func() bool { return q.Len() == 0 })
	for i := 2; i < queued+2; i++ {
		q.Push(batch(i), time.Now().Add(time.Second))
	}
	if q.Len() != queued {
		t.Fatalf("%d batches queued, want %d", q.Len(), queued)
	}

	start := time.Now()
	err = exporter.Fanout{q}.Close(config.ExportShutdownBudget)
	took := time.Since(start)
	t.Logf("Close returned after %v (budget %v + close grace %v)", took.Round(time.Millisecond),
		config.ExportShutdownBudget, config.ExportCloseGrace)
	if err != nil {
		t.Errorf("Close: %v", err)
	}
	if limit := config.ExportShutdownBudget + config.ExportCloseGrace; took > limit {
		t.Errorf("Close took %v, over the exporter's budget %v", took, limit)
	}

	fams := promtest.Gather(t, exporter.NewCollector("flowlens_agent", []*exporter.Queue{q}))
	promtest.Expect(t, fams, perBatch, "flowlens_agent_export_acked_flows_total", "exporter=kafka")
	promtest.Expect(t, fams, perBatch, "flowlens_agent_export_failed_flows_total", "exporter=kafka")
	promtest.Expect(t, fams, queued*perBatch, "flowlens_agent_export_dropped_flows_total", "exporter=kafka", "reason="+exporter.ReasonShutdown)
	promtest.Expect(t, fams, 0, "flowlens_agent_export_dropped_flows_total", "exporter=kafka", "reason="+exporter.ReasonQueueFull)

	// Resumed, the broker writes what it had read before it stopped: the
	// records of the batch the Export held, sent and never acknowledged,
	// so counted failed (in doubt), and nothing of the queued batches,
	// never sent. The flows counted lost include every flow not delivered.
	b.Resume()
	perBatchSeen := map[int]int{}
	for _, f := range consumeAll(t, b.Addr, "stuck") {
		i := int(f.Packets) // records(n): flow i has i packets, but the first 3
		if f.SrcPort == 40000 || f.SrcPort == 0 {
			i = 0
		}
		perBatchSeen[i/perBatch]++
	}
	t.Logf("consumed after the broker resumed, flows per batch: %v", perBatchSeen)
	if perBatchSeen[0] != perBatch {
		t.Errorf("batch 0 (acknowledged): %d flows consumed, want %d", perBatchSeen[0], perBatch)
	}
	if n := perBatchSeen[1]; n != 0 && n != perBatch {
		t.Errorf("batch 1 (in the Export, counted failed): %d flows consumed, want all or none", n)
	}
	for i := 2; i < queued+2; i++ {
		if n := perBatchSeen[i]; n != 0 {
			t.Errorf("batch %d (queued, counted lost at shutdown): %d flows consumed, want 0", i, n)
		}
	}
}

// consumeAll reads every flow of topic's records, until none came for
// two seconds.
func consumeAll(t *testing.T, addr, topic string) []*flowv1.Flow {
	t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out []*flowv1.Flow
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := c.PollFetches(ctx)
		cancel()
		if len(fs.Records()) == 0 && len(out) > 0 {
			return out
		}
		for _, r := range fs.Records() {
			var b flowv1.FlowBatch
			if err := proto.Unmarshal(r.Value, &b); err != nil {
				t.Fatal(err)
			}
			out = append(out, b.Flows...)
		}
	}
	t.Fatalf("topic %q: still consuming after a minute (%d flows)", topic, len(out))
	return nil
}

package exporter_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
	"github.com/flowlens/flowlens/pkg/flow"
)

// fakeExp is an exporter. Bare (the "plain" one) it is neither
// Delivering nor a Connector; wrapped in delivering it keeps the counts
// keeps; wrapped in connecting it also reports *up.
type fakeExp struct {
	name  string
	stats exporter.DeliveryStats
	keeps exporter.Counts
}

func (e *fakeExp) Name() string                                { return e.name }
func (e *fakeExp) Export(context.Context, []flow.Record) error { return nil }
func (e *fakeExp) Close() error                                { return nil }

type delivering struct{ *fakeExp }

func (e delivering) Delivery() (*exporter.DeliveryStats, exporter.Counts) { return &e.stats, e.keeps }

type connecting struct {
	delivering
	up *bool
}

func (e connecting) Connected() bool { return *e.up }

// Every exporter's queue and delivery counts, with exact values, one
// series per exporter label; a count an exporter does not keep is absent.
func TestCollectorExactValues(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	up, down := true, false
	grpc := &fakeExp{name: "grpc", keeps: exporter.CountMessages | exporter.CountSendErrors | exporter.CountRetries | exporter.CountRefused}
	grpc.stats.Refused.Store(6)
	grpc.stats.Messages.Store(4)
	otlp := &fakeExp{name: "otlp", keeps: exporter.CountAcked | exporter.CountRejected | exporter.CountFailed | exporter.CountRetries}
	otlp.stats.AckedFlows.Store(990)
	otlp.stats.RejectedFlows.Store(7)
	otlp.stats.FailedFlows.Store(3)
	otlp.stats.Retries.Store(12)
	ipfix := &fakeExp{name: "ipfix", keeps: exporter.CountMessages | exporter.CountTemplates | exporter.CountSendErrors | exporter.CountFailed}
	ipfix.stats.Messages.Store(21)
	ipfix.stats.Bytes.Store(28000)
	ipfix.stats.Records.Store(400)
	ipfix.stats.Templates.Store(2)
	ipfix.stats.SendErrors.Store(3)
	ipfix.stats.FailedFlows.Store(17)
	kafka := &fakeExp{name: "kafka", keeps: exporter.CountAcked | exporter.CountFailed | exporter.CountRecordAcks}
	kafka.stats.AckedFlows.Store(1200)
	kafka.stats.FailedFlows.Store(7)
	kafka.stats.AckedRecords.Store(12)
	kafka.stats.FailedRecords.Store(1)
	kafka.stats.Latency.Observe(2 * time.Millisecond)
	kafka.stats.Latency.Observe(40 * time.Millisecond)
	kafka.stats.Latency.Observe(time.Minute)

	gq := exporter.NewQueue(connecting{delivering{grpc}, &up}, 8, log)
	gq.Stats.Batches.Store(9)
	gq.Stats.Flows.Store(900)
	gq.Stats.Errors.Store(1)
	gq.Stats.ErrorFlows.Store(100) // its fake counts no failed flows: the queue's count shows
	gq.Stats.DroppedBatches.Store(2)
	gq.Stats.DroppedFlows.Store(200)
	gq.Stats.ShutdownBatches.Store(1)
	gq.Stats.ShutdownFlows.Store(37)
	gq.Stats.WaitNanos.Store(1_500_000_000)
	for range 3 { // queued: no Run takes them
		gq.Push(flow.BatchOf(make([]flow.Record, 1)), time.Time{})
	}
	plain := exporter.NewQueue(&fakeExp{name: "plain"}, 8, log)
	plain.Stats.Errors.Store(2)
	plain.Stats.ErrorFlows.Store(55)
	oq := exporter.NewQueue(delivering{otlp}, 8, log)
	oq.Stats.ErrorFlows.Store(40) // otlp counts its own failed flows: those show
	queues := []*exporter.Queue{gq, plain, oq,
		exporter.NewQueue(connecting{delivering{ipfix}, &down}, 8, log),
		exporter.NewQueue(delivering{kafka}, 8, log),
	}
	c := exporter.NewCollector("flowlens_agent", queues)

	f := promtest.Gather(t, c)
	expect := func(want float64, name, exp string, labels ...string) {
		t.Helper()
		promtest.Expect(t, f, want, "flowlens_agent_export_"+name, append([]string{"exporter=" + exp}, labels...)...)
	}
	absent := func(name, exp string) {
		t.Helper()
		promtest.Absent(t, f, "flowlens_agent_export_"+name, "exporter="+exp)
	}
	expect(9, "batches_total", "grpc")
	expect(900, "flows_total", "grpc")
	expect(1, "errors_total", "grpc")
	expect(2, "dropped_batches_total", "grpc", "reason=queue_full")
	expect(200, "dropped_flows_total", "grpc", "reason=queue_full")
	expect(1, "dropped_batches_total", "grpc", "reason=shutdown")
	expect(37, "dropped_flows_total", "grpc", "reason=shutdown")
	expect(0, "dropped_flows_total", "plain", "reason=shutdown")
	expect(1.5, "wait_seconds_total", "grpc")
	expect(3, "queue_batches", "grpc")
	expect(1, "connected", "grpc")
	expect(6, "refused_total", "grpc")
	expect(4, "messages_total", "grpc")
	expect(0, "retries_total", "grpc")
	absent("acked_flows_total", "grpc")
	absent("acked_records_total", "grpc")
	absent("template_messages_total", "grpc")
	expect(0, "batches_total", "plain")
	expect(2, "errors_total", "plain")
	// Every exporter counts its failed flows: the queue's count of the
	// flows in failed exports for those that do not count them.
	expect(100, "failed_flows_total", "grpc")
	expect(55, "failed_flows_total", "plain")
	absent("connected", "plain")
	absent("messages_total", "plain")
	expect(990, "acked_flows_total", "otlp")
	expect(7, "rejected_flows_total", "otlp")
	expect(3, "failed_flows_total", "otlp")
	expect(12, "retries_total", "otlp")
	expect(21, "messages_total", "ipfix")
	expect(28000, "message_bytes_total", "ipfix")
	expect(400, "records_total", "ipfix")
	expect(2, "template_messages_total", "ipfix")
	expect(3, "send_errors_total", "ipfix")
	expect(17, "failed_flows_total", "ipfix")
	expect(0, "connected", "ipfix")
	absent("retries_total", "ipfix")
	expect(12, "acked_records_total", "kafka")
	expect(1200, "acked_flows_total", "kafka")
	expect(1, "failed_records_total", "kafka")
	expect(7, "failed_flows_total", "kafka")
	expect(3, "ack_latency_seconds", "kafka")
	absent("messages_total", "kafka")
	if h := f["flowlens_agent_export_ack_latency_seconds"].Metric[0].Histogram; h.GetSampleSum() < 60.04 || h.GetSampleSum() > 60.05 {
		t.Errorf("ack latency sum %v s, want 60.042", h.GetSampleSum())
	} else {
		cum := map[float64]uint64{}
		for _, b := range h.Bucket {
			cum[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		if cum[.001] != 0 || cum[.0025] != 1 || cum[.05] != 2 || cum[30] != 2 {
			t.Errorf("ack latency buckets %v: want 2ms in le=0.0025, 40ms in le=0.05, 1m above 30s", cum)
		}
	}

	// Read at scrape time.
	up = false
	grpc.stats.Refused.Add(1)
	f = promtest.Gather(t, c)
	expect(0, "connected", "grpc")
	expect(7, "refused_total", "grpc")
}

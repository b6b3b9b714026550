package exporter

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The reasons of the dropped counts (label reason).
const (
	ReasonQueueFull = "queue_full" // the queue stayed full past its wait budget (QueueStats.DroppedFlows)
	ReasonShutdown  = "shutdown"   // still queued when the shutdown budget ran out (QueueStats.ShutdownFlows)
)

// queueCollector reads the exporters' metrics at scrape time, one series
// per exporter label: every Queue's counts, whether a Connector reaches
// its consumer, and the DeliveryStats counts a Delivering exporter keeps.
type queueCollector struct {
	queues []*Queue

	batches, flows, errors, droppedBatches, droppedFlows, queued, wait *prometheus.Desc
	connected, refused, acked, rejected, failed, retries               *prometheus.Desc
	messages, bytes, records, templates, sendErrors                    *prometheus.Desc
	ackedRecords, failedRecords, ackLatency                            *prometheus.Desc
}

// NewCollector is the metrics of the exporters behind qs, named
// <namespace>_export_* (docs/metrics-agent.md).
func NewCollector(namespace string, qs []*Queue) prometheus.Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_export_"+name, help, []string{"exporter"}, nil)
	}
	// The dropped counts say why (Reason*): a metric with the exporter and
	// the reason.
	dr := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_export_"+name, help, []string{"exporter", "reason"}, nil)
	}
	return &queueCollector{
		queues:         qs,
		batches:        d("batches_total", "Batches an exporter exported."),
		flows:          d("flows_total", "Flows an exporter exported."),
		errors:         d("errors_total", "Export calls that failed (the batch is lost)."),
		droppedBatches: dr("dropped_batches_total", "Batches never handed to the exporter, by reason: queue_full, dropped oldest first because the queue stayed full (slow or absent consumer); shutdown, still queued when the exporter's shutdown budget ran out."),
		droppedFlows:   dr("dropped_flows_total", "Flows in the dropped batches, by reason (queue_full, shutdown): lost."),
		queued:         d("queue_batches", "Batches waiting in the exporter's queue."),
		wait:           d("wait_seconds_total", "Time evictions spent waiting for room in the exporter's full queue (backpressure from a slower consumer)."),
		connected:      d("connected", "1 if the exporter reaches its consumer (grpc: a stream is open), 0 if not."),
		refused:        d("refused_total", "Messages the consumer refused after they were sent (lost; counted as exported by export_flows_total, their flows in rejected_flows_total)."),
		acked:          d("acked_flows_total", "Flows the consumer acknowledged (grpc: in messages the collector acknowledged; kafka: in records the brokers acked; otlp: log records the receiver accepted)."),
		rejected:       d("rejected_flows_total", "Flows the consumer rejected (grpc: in messages the collector refused; otlp: partial success, or a request refused with a non-retryable error): lost."),
		failed:         d("failed_flows_total", "Flows handed to the exporter and not delivered: lost in failed sends, writes or records (ipfix, kafka, stdout), or given up on, the consumer unreachable past the retry timeout or at shutdown (grpc: not acknowledged; kafka, otlp); an exporter that does not count them, every flow of its failed exports. With the acknowledged, rejected and dropped flows, every flow the exporter was given."),
		retries:        d("retries_total", "Requests resent after a retryable failure (consumer down, overloaded, or asking to retry later)."),
		messages:       d("messages_total", "Messages the exporter sent (grpc: FlowBatch messages; ipfix: IPFIX messages; otlp: requests the receiver accepted)."),
		bytes:          d("message_bytes_total", "Bytes of the messages the exporter sent."),
		records:        d("records_total", "Flow records in the messages the exporter sent."),
		templates:      d("template_messages_total", "Messages that carried the templates (ipfix: first message, UDP refresh, each new TCP connection)."),
		sendErrors:     d("send_errors_total", "Failed sends and connection attempts (grpc: streams that failed and were reopened)."),
		ackedRecords:   d("acked_records_total", "Records the consumer acknowledged (kafka: produced records the brokers acked)."),
		failedRecords:  d("failed_records_total", "Records that failed for good (not acknowledged; their flows are lost)."),
		ackLatency:     d("ack_latency_seconds", "Time from producing a record to its acknowledgement."),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.batches, c.flows, c.errors, c.droppedBatches, c.droppedFlows, c.queued, c.wait,
		c.connected, c.refused, c.acked, c.rejected, c.failed, c.retries,
		c.messages, c.bytes, c.records, c.templates, c.sendErrors, c.ackedRecords, c.failedRecords, c.ackLatency} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.queues {
		name := q.Name()
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
		}
		st := &q.Stats
		counter(c.batches, st.Batches.Load())
		counter(c.flows, st.Flows.Load())
		counter(c.errors, st.Errors.Load())
		for _, x := range []struct {
			reason         string
			batches, flows *atomic.Uint64
		}{{ReasonQueueFull, &st.DroppedBatches, &st.DroppedFlows}, {ReasonShutdown, &st.ShutdownBatches, &st.ShutdownFlows}} {
			ch <- prometheus.MustNewConstMetric(c.droppedBatches, prometheus.CounterValue, float64(x.batches.Load()), name, x.reason)
			ch <- prometheus.MustNewConstMetric(c.droppedFlows, prometheus.CounterValue, float64(x.flows.Load()), name, x.reason)
		}
		ch <- prometheus.MustNewConstMetric(c.wait, prometheus.CounterValue, float64(st.WaitNanos.Load())/1e9, name)
		ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(q.Len()), name)
		if e, ok := q.exp.(Connector); ok {
			up := 0.0
			if e.Connected() {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, up, name)
		}
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(q.FailedFlows()), name)
		if e, ok := q.exp.(Delivering); ok {
			c.collectDelivery(ch, name, e)
		}
	}
}

// collectDelivery shows the counts e keeps (its failed flows are shown
// for every exporter: Queue.FailedFlows).
func (c *queueCollector) collectDelivery(ch chan<- prometheus.Metric, name string, e Delivering) {
	st, keeps := e.Delivery()
	counter := func(d *prometheus.Desc, v *atomic.Uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v.Load()), name)
	}
	for _, x := range []struct {
		count Counts
		d     *prometheus.Desc
		v     *atomic.Uint64
	}{
		{CountMessages, c.messages, &st.Messages}, {CountMessages, c.bytes, &st.Bytes}, {CountMessages, c.records, &st.Records},
		{CountTemplates, c.templates, &st.Templates}, {CountSendErrors, c.sendErrors, &st.SendErrors},
		{CountRetries, c.retries, &st.Retries}, {CountRefused, c.refused, &st.Refused},
		{CountAcked, c.acked, &st.AckedFlows}, {CountRejected, c.rejected, &st.RejectedFlows},
		{CountRecordAcks, c.ackedRecords, &st.AckedRecords}, {CountRecordAcks, c.failedRecords, &st.FailedRecords},
	} {
		if keeps&x.count != 0 {
			counter(x.d, x.v)
		}
	}
	if keeps&CountRecordAcks != 0 {
		n, sum, buckets := st.Latency.Snapshot()
		ch <- prometheus.MustNewConstHistogram(c.ackLatency, n, sum, buckets, name)
	}
}

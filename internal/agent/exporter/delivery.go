package exporter

import "sync/atomic"

// DeliveryStats is the one shape in which every exporter reports what
// became of the flows it was handed, beyond the Queue's own counts; its
// metrics have the same names for every exporter, told apart by the
// exporter label (docs/metrics-agent.md). Exporters add to it once per
// message, request or Export, never per flow. Each exporter keeps the
// counts its consumer lets it learn, and says which (Counts).
type DeliveryStats struct {
	// Messages are the messages sent (grpc: FlowBatch messages; ipfix:
	// IPFIX messages; otlp: requests the receiver accepted), Bytes their
	// bytes (kafka: of the records the brokers acknowledged, before
	// compression), Records the flow records in them.
	Messages, Bytes, Records atomic.Uint64
	// Templates are the messages that carried the templates (ipfix).
	Templates atomic.Uint64
	// SendErrors are failed sends and connection attempts (grpc: streams
	// that failed and were reopened).
	SendErrors atomic.Uint64
	// Retries are attempts after a retryable failure.
	Retries atomic.Uint64
	// Refused are messages the consumer refused after they were sent
	// (grpc): lost, and counted as exported by the Queue.
	Refused atomic.Uint64
	// AckedFlows the consumer acknowledged, RejectedFlows it rejected
	// (lost), FailedFlows handed to the exporter and not delivered (failed
	// sends or records, or given up on). With the Queue's dropped flows
	// they add up to every flow the exporter was given.
	AckedFlows, RejectedFlows, FailedFlows atomic.Uint64
	// AckedRecords and FailedRecords are the consumer's per-record
	// outcomes (kafka), Latency each record's time to its acknowledgement.
	AckedRecords, FailedRecords atomic.Uint64
	Latency                     Latency
}

// Counts is a set of DeliveryStats counts: those an exporter keeps, and
// so those its metrics show. A count an exporter cannot learn (a gRPC
// collector does not acknowledge flows) is left out rather than shown as
// a misleading 0.
type Counts uint16

// The counts of DeliveryStats.
const (
	CountMessages Counts = 1 << iota // Messages, Bytes, Records
	CountTemplates
	CountSendErrors
	CountRetries
	CountRefused
	CountAcked      // AckedFlows
	CountRejected   // RejectedFlows
	CountFailed     // FailedFlows
	CountRecordAcks // AckedRecords, FailedRecords, Latency
)

// Delivering is an exporter that keeps DeliveryStats.
type Delivering interface {
	// Delivery returns the exporter's statistics and the counts it keeps.
	Delivery() (*DeliveryStats, Counts)
}

// Connector is an exporter that knows whether it reaches its consumer
// (grpc: a stream is open).
type Connector interface {
	Connected() bool
}

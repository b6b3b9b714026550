package main

// The scale run with the agent exporting to Kafka (-scale-exports
// kafka-batch,kafka-flow): one local broker for the whole benchmark
// (internal/testkit/kafkatest, the tests' broker), a fresh topic per run,
// and after the agent exits, what the broker holds: its records (the
// partitions' end offsets) and, consumed through pkg/receiver's Kafka
// consumer, their flows, packets and bytes. The scale run checks those
// against the agent's counters and the lab interfaces', as it checks the
// collector's JSON for gRPC: the CPU per flow is per delivered flow.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// kafkaPartitions is each topic's partition count: the exporter benchmark's
// (internal/agent/exporter/kafka), so one node's flows spread over several
// partitions as in a cluster.
const kafkaPartitions = 4

// kafkaMessage is the agent's --kafka-message for a -scale-exports value,
// "" if it is not a Kafka one.
func kafkaMessage(export string) string {
	if msg, ok := strings.CutPrefix(export, "kafka-"); ok {
		return msg
	}
	return ""
}

// kafkaLab is the benchmark's broker.
type kafkaLab struct {
	broker *kafkatest.Broker
	tb     *programTB
	topics int
}

// kafkaMissing is nil when the broker can run, else why not and how to
// get it.
func kafkaMissing() error {
	if _, err := kafkatest.Libs(); err != nil {
		return fmt.Errorf("needs %s: %w", kafkatest.What, err)
	}
	return nil
}

// startKafka starts the broker (about 10 s here; 90 s at most).
func startKafka() (*kafkaLab, error) {
	if err := kafkaMissing(); err != nil {
		return nil, err
	}
	// kafkatest's gate asks testing.Short, which needs the testing flags
	// registered (and left at their defaults: this is no test).
	testing.Init()
	k := &kafkaLab{tb: &programTB{}}
	if err := k.tb.run(func() { k.broker = kafkatest.Start(k.tb) }); err != nil {
		k.close()
		return nil, fmt.Errorf("kafka broker: %w", err)
	}
	return k, nil
}

// close kills the broker and removes its directory.
func (k *kafkaLab) close() { k.tb.cleanup() }

// newTopic creates a fresh topic for one agent run.
func (k *kafkaLab) newTopic() (string, error) {
	k.topics++
	topic := fmt.Sprintf("flowlens-bench-%d", k.topics)
	return topic, k.tb.run(func() { k.broker.CreateTopic(topic, kafkaPartitions) })
}

// agentArgs are the agent's flags to export to topic: the exporter's
// defaults otherwise (acks all, lz4, 50 ms linger, 1000 flows per batch).
func (k *kafkaLab) agentArgs(export, topic string) []string {
	return []string{"--export", "kafka", "--kafka-brokers", k.broker.Addr, "--kafka-topic", topic,
		"--kafka-message", kafkaMessage(export)}
}

// delivery is what the broker holds of one run.
type delivery struct {
	Records        int64  `json:"broker_records"` // the topic's end offsets, summed
	Consumed       uint64 `json:"consumed_records"`
	Malformed      uint64 `json:"malformed_records"`
	Flows          int    `json:"flows"`
	Packets, Bytes uint64 `json:"-"`
}

// delivered reads topic back: its end offsets, then every record through
// receiver.Consumer (decoding and validation as the collector's), until
// it has them all.
func (k *kafkaLab) delivered(topic string) (delivery, error) {
	var d delivery
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if d.Records, err = k.endOffsets(ctx, topic); err != nil {
		return d, err
	}
	var flows, packets, bytes atomic.Uint64
	count := func(_ context.Context, b *receiver.Batch) error {
		flows.Add(uint64(len(b.Flows)))
		for _, f := range b.Flows {
			packets.Add(f.GetPackets())
			bytes.Add(f.GetBytes())
		}
		return nil
	}
	c, err := receiver.NewConsumer(count, receiver.ConsumerOptions{
		Conn: flowkafka.Conn{Brokers: []string{k.broker.Addr}}, Topic: topic, Group: "bench-" + topic,
		// The topic is read back after the run: from its start, not its end.
		StartOffset: receiver.KafkaStartEarliest,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return d, err
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	for int64(c.Stats.Records.Load()) < d.Records && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		return d, err
	}
	d.Consumed, d.Malformed = c.Stats.Records.Load(), c.Stats.Malformed.Load()
	d.Flows, d.Packets, d.Bytes = int(flows.Load()), packets.Load(), bytes.Load()
	if int64(d.Consumed) < d.Records {
		return d, fmt.Errorf("topic %s: consumed %d of its %d records in 2 minutes", topic, d.Consumed, d.Records)
	}
	return d, nil
}

// endOffsets sums the latest offsets of topic's partitions: the records
// the broker appended to a topic created empty.
func (k *kafkaLab) endOffsets(ctx context.Context, topic string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.broker.Addr))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range int32(kafkaPartitions) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1 // -1: the latest offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	var sum int64
	n := 0
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, fmt.Errorf("end offset of %s/%d: %w", topic, p.Partition, err)
			}
			sum += p.Offset
			n++
		}
	}
	if n != kafkaPartitions {
		return 0, fmt.Errorf("end offsets of %s: %d of %d partitions answered", topic, n, kafkaPartitions)
	}
	return sum, nil
}

// programTB is the testing.TB kafkatest wants, for a program: temporary
// directories and cleanups it keeps until cleanup, and a Fatal (or Skip:
// the broker is missing) that panics for run to turn into an error. kafkatest calls only these methods; the embedded interface is
// nil, so any other would panic too, and be recovered the same way.
type programTB struct {
	testing.TB
	cleanups []func()
}

// fatal is a programTB's Fatal or Skip.
type fatal string

func (p *programTB) Helper()                        {}
func (p *programTB) Cleanup(f func())               { p.cleanups = append(p.cleanups, f) }
func (p *programTB) Fatal(args ...any)              { panic(fatal(fmt.Sprint(args...))) }
func (p *programTB) Fatalf(format string, a ...any) { panic(fatal(fmt.Sprintf(format, a...))) }
func (p *programTB) Skip(args ...any)               { p.Fatal(args...) }

func (p *programTB) TempDir() string {
	dir, err := os.MkdirTemp("", "flowlens-bench-kafka-")
	if err != nil {
		p.Fatal(err)
	}
	p.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// cleanup runs the cleanups, last registered first, as testing does.
func (p *programTB) cleanup() {
	for _, f := range slices.Backward(p.cleanups) {
		f()
	}
	p.cleanups = nil
}

// run calls f, which uses p, and returns its Fatal as an error.
func (p *programTB) run(f func()) (err error) {
	defer func() {
		switch r := recover().(type) {
		case nil:
		case fatal:
			err = errors.New(string(r))
		default:
			err = fmt.Errorf("kafkatest: %v", r)
		}
	}()
	f()
	return nil
}

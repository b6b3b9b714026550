package receiver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
	"github.com/flowlens/flowlens/pkg/receiver"
)

func producer(t *testing.T, addr string) func(recs ...*kgo.Record) {
	t.Helper()
	p, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return func(recs ...*kgo.Record) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func batchHeader() []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: flowkafka.HeaderContentType, Value: []byte(flowkafka.ContentTypeBatch)}}
}

// TestConsumerPoisonRecords: on a real broker, records that would have
// taken a collector down or stopped its partition (450,000 empty flows in
// 900 KB, bytes that are not protobuf) are skipped, counted and committed
// with the good ones around them; a flow beyond a bound is refused alone.
// The group keeps consuming, and a member that starts after a restart
// (earliest start: it would re-read anything not committed) does not see
// the poison again.
func TestConsumerPoisonRecords(t *testing.T) {
	b := kafkatest.Start(t)
	const topic, group = "poison-test", "poison-test-group"
	b.CreateTopic(topic, 1)
	produce := producer(t, b.Addr)
	long := flows(3, 53)
	long.Flows[1].NodeName = strings.Repeat("n", 254) // longer than a Kubernetes node name
	const empty = 450_000
	produce(
		record(t, topic, 0, flowkafka.ContentTypeBatch, flows(2, 1)),
		&kgo.Record{Topic: topic, Partition: 0, Value: emptyFlows(empty), Headers: batchHeader()},
		&kgo.Record{Topic: topic, Partition: 0, Value: []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, Headers: batchHeader()},
		record(t, topic, 0, flowkafka.ContentTypeBatch, long),
		record(t, topic, 0, flowkafka.ContentTypeBatch, flows(3, 2)),
	)
	c1 := runConsumerFrom(t, b.Addr, topic, group, receiver.KafkaStartEarliest)
	got := c1.wait(t, 7)
	ports := map[uint32]int{}
	for _, f := range got {
		ports[f.GetDstPort()]++
	}
	if len(got) != 7 || ports[1] != 2 || ports[53] != 2 || ports[2] != 3 {
		t.Fatalf("handled %d flows by port %v, want 2 to 1, 2 to 53, 3 to 2", len(got), ports)
	}
	st := &c1.c.Stats
	if st.Records.Load() != 5 || st.Malformed.Load() != 2 || st.RefusedTooMany.Load() != empty || st.RefusedBounds.Load() != 1 {
		t.Errorf("records %d, malformed %d, refused too many %d, refused bounds %d; want 5, 2, %d, 1",
			st.Records.Load(), st.Malformed.Load(), st.RefusedTooMany.Load(), st.RefusedBounds.Load(), empty)
	}
	c1.stop()
	if st.Commits.Load() == 0 || st.CommitErrors.Load() != 0 {
		t.Errorf("commits %d, commit errors %d", st.Commits.Load(), st.CommitErrors.Load())
	}

	// The restarted member reads on from the commit: the next good
	// record, not the poison.
	produce(record(t, topic, 0, flowkafka.ContentTypeBatch, flows(1, 3)))
	c2 := runConsumerFrom(t, b.Addr, topic, group, receiver.KafkaStartEarliest)
	got = c2.wait(t, 1)
	time.Sleep(500 * time.Millisecond) // anything re-read would come with it
	got = c2.wait(t, 1)
	if len(got) != 1 || got[0].GetDstPort() != 3 || c2.c.Stats.Records.Load() != 1 || c2.c.Stats.Malformed.Load() != 0 {
		t.Errorf("after a restart: %d flows (records %d, malformed %d), want only the new one",
			len(got), c2.c.Stats.Records.Load(), c2.c.Stats.Malformed.Load())
	}
}

// TestConsumerNewGroupStartsAtEnd: a new group starts at the topic's end
// by default (records produced before it joined are not replayed into the
// counters), and at its earliest record with KafkaStartEarliest.
func TestConsumerNewGroupStartsAtEnd(t *testing.T) {
	b := kafkatest.Start(t)
	const topic = "start-test"
	b.CreateTopic(topic, 2)
	produce := producer(t, b.Addr)
	produce(record(t, topic, 0, flowkafka.ContentTypeBatch, flows(2, 1)),
		record(t, topic, 1, flowkafka.ContentTypeBatch, flows(2, 1)))

	latest := runConsumerFrom(t, b.Addr, topic, "new-group", "")
	for deadline := time.Now().Add(time.Minute); latest.c.Stats.Partitions.Load() != 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the new group's member was not given the partitions")
		}
	}
	// The member looks the end up once it has the partitions: produce
	// until something arrives, then only the new flows may have.
	for deadline := time.Now().Add(time.Minute); ; {
		produce(record(t, topic, 0, flowkafka.ContentTypeBatch, flows(1, 2)), record(t, topic, 1, flowkafka.ContentTypeBatch, flows(1, 2)))
		latest.mu.Lock()
		n := len(latest.flows)
		latest.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, f := range latest.wait(t, 1) {
		if f.GetDstPort() != 2 {
			t.Fatalf("a new group (default start) handled a flow produced before it joined (port %d)", f.GetDstPort())
		}
	}

	earliest := runConsumerFrom(t, b.Addr, topic, "replaying-group", receiver.KafkaStartEarliest)
	ports := map[uint32]int{}
	for _, f := range earliest.wait(t, 4) {
		ports[f.GetDstPort()]++
	}
	if ports[1] != 4 {
		t.Errorf("a new group starting at the earliest record handled ports %v, want the 4 flows to port 1", ports)
	}

	if _, err := receiver.NewConsumer(func(context.Context, *receiver.Batch) error { return nil },
		receiver.ConsumerOptions{Conn: flowkafka.Conn{Brokers: []string{b.Addr}}, Topic: topic, Group: "g", StartOffset: "beginning"}); err == nil ||
		err.Error() != `collector: Kafka start offset "beginning": must be latest or earliest` {
		t.Errorf("StartOffset beginning: %v", err)
	}
}

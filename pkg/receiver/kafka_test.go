package receiver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// consumerRun runs a Consumer of group on topic until stopped, collecting
// the flows its Handler gets.
type consumerRun struct {
	c    *receiver.Consumer
	stop context.CancelFunc
	done chan struct{}

	mu    sync.Mutex
	flows []*flowv1.Flow
}

func runConsumer(t *testing.T, addr, topic, group string) *consumerRun {
	t.Helper()
	return runConsumerFrom(t, addr, topic, group, receiver.KafkaStartEarliest)
}

// runConsumerFrom is runConsumer of a group that starts at start.
func runConsumerFrom(t *testing.T, addr, topic, group, start string) *consumerRun {
	t.Helper()
	r := &consumerRun{done: make(chan struct{})}
	c, err := receiver.NewConsumer(func(_ context.Context, b *receiver.Batch) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.flows = append(r.flows, b.Flows...)
		return nil
	}, receiver.ConsumerOptions{Conn: flowkafka.Conn{Brokers: []string{addr}}, Topic: topic, Group: group,
		SessionTimeout: 6 * time.Second, StartOffset: start})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = func() { cancel(); <-r.done }
	go func() { c.Run(ctx); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

func (r *consumerRun) wait(t *testing.T, n int) []*flowv1.Flow {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		r.mu.Lock()
		got := append([]*flowv1.Flow(nil), r.flows...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer handled %d flows, want %d", len(got), n)
		}
	}
}

func record(t *testing.T, topic string, p int32, ct string, m proto.Message) *kgo.Record {
	t.Helper()
	v, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Topic: topic, Partition: p, Value: v}
	if ct != "" {
		r.Headers = []kgo.RecordHeader{{Key: flowkafka.HeaderContentType, Value: []byte(ct)}}
	}
	return r
}

// TestConsumer: both record kinds reach the Handler; malformed records are
// counted and skipped without stopping their partition; offsets are
// committed after handling, so a member that joins after another left
// handles only what came after.
func TestConsumer(t *testing.T) {
	b := kafkatest.Start(t)
	const topic, group = "consumer-test", "consumer-test-group"
	b.CreateTopic(topic, 2)
	p, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bad := flows(1, 53)
	bad.Flows[0].SrcAddr = []byte{1, 2, 3} // not an address: flowpb.Validate refuses it
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(
		&kgo.Record{Topic: topic, Partition: 0, Value: []byte("no header")},
		&kgo.Record{Topic: topic, Partition: 0, Value: []byte{0xff, 0xff}, Headers: []kgo.RecordHeader{{Key: flowkafka.HeaderContentType, Value: []byte(flowkafka.ContentTypeBatch)}}},
		record(t, topic, 1, flowkafka.ContentTypeBatch, bad),
		record(t, topic, 0, flowkafka.ContentTypeBatch, flows(3, 80)),
		record(t, topic, 1, flowkafka.ContentTypeFlow, flows(1, 443).Flows[0]),
	)

	c1 := runConsumer(t, b.Addr, topic, group)
	got := c1.wait(t, 4)
	ports := map[uint32]int{}
	for _, f := range got {
		ports[f.GetDstPort()]++
	}
	if len(got) != 4 || ports[80] != 3 || ports[443] != 1 {
		t.Fatalf("handled %d flows by port %v, want 3 to 80 and 1 to 443", len(got), ports)
	}
	if n := c1.c.Stats.Malformed.Load(); n != 3 {
		t.Errorf("Malformed = %d, want 3", n)
	}
	c1.stop() // commits, leaves the group

	// New flows in both partitions: a partition is read in order, so
	// anything of before would come to the next member ahead of them.
	produce(record(t, topic, 0, flowkafka.ContentTypeBatch, flows(2, 8080)),
		record(t, topic, 1, flowkafka.ContentTypeFlow, flows(1, 8080).Flows[0]))
	c2 := runConsumer(t, b.Addr, topic, group)
	got = c2.wait(t, 3)
	for _, f := range got {
		if f.GetDstPort() != 8080 {
			t.Errorf("the next member handled a flow to port %d, handled and committed before it joined", f.GetDstPort())
		}
	}
}

// TestConsumerPartitions: Stats.Partitions follows what the group gives
// each member: all 4 partitions to a lone member, a split of the 4 between
// two members (each some), all 4 to the one left when the other stops, and
// 0 once a member has left.
func TestConsumerPartitions(t *testing.T) {
	b := kafkatest.Start(t)
	const topic, group = "partitions-test", "partitions-test-group"
	b.CreateTopic(topic, 4)
	held := func(rs ...*consumerRun) []int64 {
		n := make([]int64, len(rs))
		for i, r := range rs {
			n[i] = r.c.Stats.Partitions.Load()
		}
		return n
	}
	waitHeld := func(what string, ok func([]int64) bool, rs ...*consumerRun) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ok(held(rs...)); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: partitions held %v", what, held(rs...))
			}
		}
	}
	c1 := runConsumer(t, b.Addr, topic, group)
	waitHeld("one member", func(n []int64) bool { return n[0] == 4 }, c1)
	c2 := runConsumer(t, b.Addr, topic, group)
	waitHeld("two members", func(n []int64) bool { return n[0] > 0 && n[1] > 0 && n[0]+n[1] == 4 }, c1, c2)
	c2.stop()
	if n := c2.c.Stats.Partitions.Load(); n != 0 {
		t.Errorf("a member that left holds %d partitions", n)
	}
	waitHeld("the other member left", func(n []int64) bool { return n[0] == 4 }, c1)
	c1.stop()
	if n := c1.c.Stats.Partitions.Load(); n != 0 {
		t.Errorf("a member that left holds %d partitions", n)
	}
}

// TestConsumerOptionsRequired: a Consumer without a topic or a group is
// refused before it connects, saying which is missing (the group has no
// default: it is the consuming program's identity, and the collector's
// default is its own option's, collectoropt.DefaultKafkaGroup).
func TestConsumerOptionsRequired(t *testing.T) {
	h := func(context.Context, *receiver.Batch) error { return nil }
	for _, tc := range []struct {
		opts receiver.ConsumerOptions
		want string
	}{
		{receiver.ConsumerOptions{Group: "g"}, "collector: no Kafka topic"},
		{receiver.ConsumerOptions{Topic: "t"}, "collector: no Kafka consumer group"},
	} {
		if _, err := receiver.NewConsumer(h, tc.opts); err == nil || err.Error() != tc.want {
			t.Errorf("NewConsumer(%+v) = %v, want %q", tc.opts, err, tc.want)
		}
	}
}

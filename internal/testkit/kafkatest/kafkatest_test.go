package kafkatest_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/flowlens/flowlens/internal/testkit/kafkatest"
)

// TestBrokerSurvivesRestart produces a record over SASL/SCRAM, restarts
// the broker, and reads the record back from the same data.
func TestBrokerSurvivesRestart(t *testing.T) {
	b := kafkatest.Start(t)
	b.CreateTopic("kafkatest-restart", 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	auth := scram.Auth{User: kafkatest.User, Pass: kafkatest.Password}
	p, err := kgo.NewClient(kgo.SeedBrokers(b.SASLAddr), kgo.SASL(auth.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Topic: "kafkatest-restart", Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatalf("produce over SASL/SCRAM: %v", err)
	}
	p.Close()

	b.Stop()
	b.Restart()

	c, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ConsumeTopics("kafkatest-restart"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fs := c.PollFetches(ctx)
	if err := fs.Err(); err != nil {
		t.Fatal(err)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "hello" {
		t.Fatalf("after restart got %d records, want the one produced", len(recs))
	}
}

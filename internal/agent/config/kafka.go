package config

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/flowlens/flowlens/internal/shared/cliconf"
)

// Kafka is the kafka exporter's configuration (--kafka-*; docs/export.md).
type Kafka struct {
	Brokers []string
	Topic   string
	// TLS is on when TLS is set or any of the files is given.
	TLS                    bool
	TLSCA, TLSCert, TLSKey string
	// SASLMechanism is none, plain or scram-sha-512; the password is read
	// from SASLPasswordFile, so no secret is on the command line.
	SASLMechanism    string
	SASLUsername     string
	SASLPasswordFile string
	Compression      string // none, lz4, zstd
	Linger           time.Duration
	MaxBatchBytes    int
	Acks             string // all, leader, none
	Message          string // batch, flow
	BatchFlows       int
}

// kafkaConn is the connection to the brokers, a group the collector's
// consumer shares (package cliconf).
var kafkaConn = cliconf.KafkaConn[Config]{
	BrokersUsage: "Kafka bootstrap brokers, host:port; required with --export kafka",
	Brokers:      func(c *Config) *[]string { return &c.Kafka.Brokers },
	TLS: cliconf.ClientTLS[Config]{Prefix: "kafka-", Peer: "brokers", CAUsage: " (default: the system's roots)",
		On:   func(c *Config) *bool { return &c.Kafka.TLS },
		CA:   func(c *Config) *string { return &c.Kafka.TLSCA },
		Cert: func(c *Config) *string { return &c.Kafka.TLSCert },
		Key:  func(c *Config) *string { return &c.Kafka.TLSKey }},
	Mechanism:    func(c *Config) *string { return &c.Kafka.SASLMechanism },
	Username:     func(c *Config) *string { return &c.Kafka.SASLUsername },
	PasswordFile: func(c *Config) *string { return &c.Kafka.SASLPasswordFile },
}

// kafkaOptions are the --kafka-* rows of the options table: the connection,
// then the exporter's own.
var kafkaOptions = append(kafkaConn.Options(), []*cliconf.Option[Config]{
	{Name: "kafka-topic", Arg: "name", Default: DefaultKafkaTopic,
		Usage: "Kafka topic the flows are produced to (it must exist; its partitions are shared by the consuming collectors)",
		Set:   func(c *Config, s string) error { c.Kafka.Topic = s; return nil }},
	{Name: "kafka-compression", Arg: "codec", Default: DefaultKafkaCompression,
		Usage: "compression of the produced record batches: none, lz4 or zstd",
		Set:   func(c *Config, s string) error { c.Kafka.Compression = s; return nil }},
	{Name: "kafka-linger", Arg: "duration", Default: DefaultKafkaLinger.String(),
		Usage: "how long a partition's records wait for more before they are sent (0 to 10s; an export waits for its acks, never for a full linger)",
		Set:   cliconf.Duration(func(c *Config) *time.Duration { return &c.Kafka.Linger })},
	{Name: "kafka-max-batch-bytes", Arg: "n", Default: itoa(DefaultKafkaMaxBatchBytes),
		Usage: "largest produce batch per partition, so largest record (1024 to 268435456; keep it under the brokers' message.max.bytes)",
		Set:   cliconf.Int(func(c *Config) *int { return &c.Kafka.MaxBatchBytes })},
	{Name: "kafka-acks", Arg: "all|leader|none", Default: DefaultKafkaAcks,
		Usage: "acknowledgement the brokers give each produce: all in-sync replicas (idempotent, no duplicates from retries), the leader, or none",
		Set:   func(c *Config, s string) error { c.Kafka.Acks = s; return nil }},
	{Name: "kafka-message", Arg: "batch|flow", Default: DefaultKafkaMessage,
		Usage: "record value: a FlowBatch protobuf of up to --kafka-batch-flows flows, or one Flow protobuf per record",
		Set:   func(c *Config, s string) error { c.Kafka.Message = s; return nil }},
	{Name: "kafka-batch-flows", Arg: "n", Default: itoa(DefaultKafkaBatchFlows),
		Usage: "flows per FlowBatch record with --kafka-message batch (1 to 100000)",
		Set:   cliconf.Int(func(c *Config) *int { return &c.Kafka.BatchFlows })},
}...)

// topicName is what Kafka accepts as a topic name.
var topicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// checkKafka checks the kafka exporter's settings; the brokers are required
// only when the exporter is used, the others always (they have defaults).
func checkKafka(c *Config) error {
	k := &c.Kafka
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(k.Brokers) == 0 {
		if slices.Contains(c.Export, "kafka") {
			add(errors.New("--kafka-brokers is required when --export includes kafka"))
		}
	}
	add(kafkaConn.Check(c))
	if !topicName.MatchString(k.Topic) || k.Topic == "." || k.Topic == ".." {
		add(cliconf.Invalid("--kafka-topic", k.Topic, errors.New("must be 1 to 249 of a-z A-Z 0-9 . _ -")))
	}
	add(checkOneOf("--kafka-compression", k.Compression, "none", "lz4", "zstd"))
	add(checkOneOf("--kafka-acks", k.Acks, "all", "leader", "none"))
	add(checkOneOf("--kafka-message", k.Message, "batch", "flow"))
	if k.Linger < 0 || k.Linger > 10*time.Second {
		add(cliconf.Invalid("--kafka-linger", k.Linger.String(), errors.New("must be from 0 to 10s")))
	}
	add(checkRange("--kafka-max-batch-bytes", k.MaxBatchBytes, 1024, 256<<20))
	add(checkRange("--kafka-batch-flows", k.BatchFlows, 1, 100_000))
	return errors.Join(errs...)
}

func checkOneOf(flagName, v string, allowed ...string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return cliconf.Invalid(flagName, v, fmt.Errorf("must be %s or %s", strings.Join(allowed[:len(allowed)-1], ", "), allowed[len(allowed)-1]))
}

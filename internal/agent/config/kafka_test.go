package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestKafkaSettings sets every --kafka-* setting by flag, by environment
// variable and by config-file key.
func TestKafkaSettings(t *testing.T) {
	dir := t.TempDir()
	pass := filepath.Join(dir, "password")
	if err := os.WriteFile(pass, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := Kafka{Brokers: []string{"k1:9092", "[fd00::1]:9093"}, Topic: "flows.v1", TLS: true,
		TLSCA: pass, TLSCert: pass, TLSKey: pass,
		SASLMechanism: "scram-sha-512", SASLUsername: "agent", SASLPasswordFile: pass,
		Compression: "zstd", Linger: 10 * time.Millisecond, MaxBatchBytes: 65536, Acks: "leader",
		Message: "flow", BatchFlows: 50}
	flags := []string{"--export=kafka", "--kafka-brokers=k1:9092,[fd00::1]:9093", "--kafka-topic=flows.v1", "--kafka-tls",
		"--kafka-tls-ca=" + pass, "--kafka-tls-cert=" + pass, "--kafka-tls-key=" + pass,
		"--kafka-sasl-mechanism=scram-sha-512", "--kafka-sasl-username=agent", "--kafka-sasl-password-file=" + pass,
		"--kafka-compression=zstd", "--kafka-linger=10ms", "--kafka-max-batch-bytes=65536", "--kafka-acks=leader",
		"--kafka-message=flow", "--kafka-batch-flows=50"}
	c, err := Load(flags, withEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Kafka, want) {
		t.Errorf("flags:\n got  %+v\n want %+v", c.Kafka, want)
	}

	file := filepath.Join(dir, "agent.yaml")
	yaml := "export: [kafka]\nkafka_brokers: [k1:9092, \"[fd00::1]:9093\"]\nkafka_topic: flows.v1\nkafka_tls: true\n" +
		"kafka_tls_ca: " + pass + "\nkafka_tls_cert: " + pass + "\nkafka_tls_key: " + pass + "\n" +
		"kafka_sasl_mechanism: scram-sha-512\nkafka_sasl_username: agent\nkafka_sasl_password_file: " + pass + "\n" +
		"kafka_compression: zstd\nkafka_linger: 10ms\nkafka_max_batch_bytes: 65536\nkafka_acks: leader\n" +
		"kafka_message: flow\nkafka_batch_flows: 50\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Load([]string{"--config", file}, withEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Kafka, want) {
		t.Errorf("file:\n got  %+v\n want %+v", c.Kafka, want)
	}

	c, err = Load(nil, withEnv(map[string]string{"FLOWLENS_AGENT_EXPORT": "kafka", "FLOWLENS_AGENT_KAFKA_BROKERS": "k1:9092",
		"FLOWLENS_AGENT_KAFKA_MESSAGE": "flow", "FLOWLENS_AGENT_KAFKA_TLS": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	if k := c.Kafka; !reflect.DeepEqual(k.Brokers, []string{"k1:9092"}) || k.Message != "flow" || !k.TLS {
		t.Errorf("environment: got %+v", k)
	}
}

func TestValidateKafka(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name   string
		change func(k *Kafka)
		want   string
	}{
		{"brokers required", func(k *Kafka) { k.Brokers = nil },
			"--kafka-brokers is required when --export includes kafka"},
		{"broker no port", func(k *Kafka) { k.Brokers = []string{"k1"} },
			`invalid --kafka-brokers "k1": missing port in address`},
		{"topic", func(k *Kafka) { k.Topic = "a/b" },
			`invalid --kafka-topic "a/b": must be 1 to 249 of a-z A-Z 0-9 . _ -`},
		{"topic empty", func(k *Kafka) { k.Topic = "" },
			`invalid --kafka-topic "": must be 1 to 249 of a-z A-Z 0-9 . _ -`},
		{"tls cert without key", func(k *Kafka) { k.TLSCert = file },
			"--kafka-tls-cert and --kafka-tls-key must be given together"},
		{"tls ca missing", func(k *Kafka) { k.TLSCA = missing },
			`invalid --kafka-tls-ca "` + missing + `": no such file or directory`},
		{"sasl mechanism", func(k *Kafka) { k.SASLMechanism = "gssapi" },
			`invalid --kafka-sasl-mechanism "gssapi": must be none, plain or scram-sha-512`},
		{"sasl without user", func(k *Kafka) { k.SASLMechanism = "plain"; k.SASLPasswordFile = file; k.TLS = true },
			"--kafka-sasl-mechanism plain needs --kafka-sasl-username and --kafka-sasl-password-file"},
		{"sasl user without mechanism", func(k *Kafka) { k.SASLUsername = "u" },
			"--kafka-sasl-username and --kafka-sasl-password-file need --kafka-sasl-mechanism plain or scram-sha-512"},
		{"sasl password missing", func(k *Kafka) {
			k.SASLMechanism, k.SASLUsername, k.SASLPasswordFile, k.TLS = "plain", "u", missing, true
		},
			`invalid --kafka-sasl-password-file "` + missing + `": no such file or directory`},
		{"sasl plain without tls", func(k *Kafka) { k.SASLMechanism, k.SASLUsername, k.SASLPasswordFile = "plain", "u", file },
			"--kafka-sasl-mechanism plain sends the password in clear text: it needs TLS to the brokers (--kafka-tls, or --kafka-tls-ca); or use scram-sha-512"},
		{"sasl plain over tls", func(k *Kafka) {
			k.SASLMechanism, k.SASLUsername, k.SASLPasswordFile, k.TLSCA = "plain", "u", file, file
		}, ""},
		{"compression", func(k *Kafka) { k.Compression = "gzip" },
			`invalid --kafka-compression "gzip": must be none, lz4 or zstd`},
		{"acks", func(k *Kafka) { k.Acks = "1" }, `invalid --kafka-acks "1": must be all, leader or none`},
		{"message", func(k *Kafka) { k.Message = "json" }, `invalid --kafka-message "json": must be batch or flow`},
		{"linger", func(k *Kafka) { k.Linger = 11 * time.Second }, `invalid --kafka-linger "11s": must be from 0 to 10s`},
		{"max batch bytes", func(k *Kafka) { k.MaxBatchBytes = 1000 },
			`invalid --kafka-max-batch-bytes "1000": must be from 1024 to 268435456`},
		{"batch flows", func(k *Kafka) { k.BatchFlows = 0 },
			`invalid --kafka-batch-flows "0": must be from 1 to 100000`},
		{"ok", func(k *Kafka) {
			k.SASLMechanism, k.SASLUsername, k.SASLPasswordFile = "scram-sha-512", "u", file
			k.TLSCA, k.TLSCert, k.TLSKey, k.Linger = file, file, file, 0
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultConfig()
			c.Export = []string{"kafka"}
			c.Kafka.Brokers = []string{"kafka-0.kafka:9092"}
			tc.change(&c.Kafka)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("error:\n got  %v\n want %s", err, tc.want)
			}
		})
	}
}

package collector

import (
	"errors"
	"strconv"
	"time"

	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/httpserve"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// validate checks the ranges and the combinations of settings, and returns
// every problem found, each naming the flag at fault.
func (o *Config) validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if o.Listen != "" {
		if err := cliconf.CheckListenAddress("--listen", o.Listen); err != nil {
			add(err)
		} else if o.TLSCert == "" && !o.InsecurePlaintext && !cliconf.Loopback(o.Listen) {
			add(cliconf.Invalid("--listen", o.Listen, errors.New(
				"is not a loopback address: serve TLS (--tls-cert and --tls-key), or give --insecure-plaintext to let anyone who reaches it read and write flows in plaintext")))
		}
	} else if (o.TLSCert != "" || o.InsecurePlaintext) && o.UI.Listen == "" {
		add(errors.New(`--tls-cert and --insecure-plaintext need a gRPC listener: --listen is ""`))
	}
	add(o.History.validate())
	add(o.validateUI())
	if (o.TLSCert == "") != (o.TLSKey == "") {
		add(errors.New("--tls-cert and --tls-key must be given together"))
	}
	if o.TLSClientCA != "" && o.TLSCert == "" {
		add(errors.New("--tls-client-ca needs --tls-cert and --tls-key"))
	}
	add(cliconf.CheckRange("--max-message-bytes", o.Limits.MaxMessageBytes, minMessageBytes, maxMessageBytes))
	if n := o.Limits.MaxFlowsPerBatch; n < 1 {
		add(cliconf.Invalid("--max-flows-per-batch", strconv.Itoa(n), errors.New("must be at least 1")))
	}
	if n := o.Limits.MaxStreams; n != -1 && n < 1 {
		add(cliconf.Invalid("--max-agents", strconv.Itoa(n), errors.New("must be -1 (unlimited) or at least 1")))
	}
	if n := o.Limits.MaxAgentInstances; n < 1 {
		add(cliconf.Invalid("--max-agent-instances", strconv.Itoa(n), errors.New("must be at least 1")))
	}
	if n := o.Limits.MaxStreamsPerClient; n != -1 && n < 1 {
		add(cliconf.Invalid("--max-agents-per-client", strconv.Itoa(n), errors.New("must be -1 (unlimited) or at least 1")))
	}
	if n := o.Limits.MaxStreamsPerConnection; n < 1 {
		add(cliconf.Invalid("--max-streams-per-connection", strconv.Itoa(n), errors.New("must be at least 1")))
	}
	add(checkPositive("--shutdown-grace", o.ShutdownGrace))
	add(cliconf.CheckLevel("--log-level", o.LogLevel))
	if o.MetricsAddress != "" {
		add(cliconf.CheckListenAddress("--metrics-address", o.MetricsAddress))
	}
	add(httpserve.CheckWebConfig("--web-config-file", o.WebConfigFile))
	if o.Enrichment.StaticFile != "" && o.Enrichment.Enable != nil && !*o.Enrichment.Enable {
		add(errors.New("--k8s-static needs enrichment: drop --k8s-enrich=false"))
	}
	if o.Enrichment.StaticFile != "" && o.Enrichment.Kubeconfig != "" {
		add(errors.New("--k8s-static and --kubeconfig: choose one"))
	}
	add(checkPositive("--k8s-sync-timeout", o.Enrichment.SyncTimeout))
	if d := o.Metrics.SeriesTTL; d != 0 && d < time.Second {
		add(cliconf.Invalid("--metrics-series-ttl", d.String(), errors.New("must be 0 (never) or at least 1s")))
	}
	if n := o.Metrics.MaxSeries; n < 0 {
		add(cliconf.Invalid("--metrics-max-series", strconv.Itoa(n), errors.New("must be 0 (no cap) or more")))
	}
	add(o.checkKafka())
	// Checked here so a typo fails at start-up with the flag's name.
	for _, f := range []struct{ flag, path string }{
		{"--tls-cert", o.TLSCert}, {"--tls-key", o.TLSKey}, {"--tls-client-ca", o.TLSClientCA},
		{"--kubeconfig", o.Enrichment.Kubeconfig}, {"--k8s-static", o.Enrichment.StaticFile},
	} {
		add(cliconf.CheckFile(f.flag, f.path))
	}
	return errors.Join(errs...)
}

func checkPositive(flagName string, d time.Duration) error {
	if d <= 0 {
		return cliconf.Invalid(flagName, d.String(), errors.New("must be more than 0"))
	}
	return nil
}

// kafkaConn is the connection to the brokers, a group the agent's kafka
// exporter shares (package cliconf).
var kafkaConn = cliconf.KafkaConn[Config]{
	BrokersUsage: "Kafka bootstrap brokers, host:port: consume --kafka-topic as a member of --kafka-group (beside the gRPC listener)",
	Brokers:      func(o *Config) *[]string { return &o.Kafka.Brokers },
	TLS: cliconf.ClientTLS[Config]{Prefix: "kafka-", Peer: "brokers", CAUsage: " (default: the system's roots)",
		On:   func(o *Config) *bool { return &o.Kafka.TLS },
		CA:   func(o *Config) *string { return &o.Kafka.TLSCA },
		Cert: func(o *Config) *string { return &o.Kafka.TLSCert },
		Key:  func(o *Config) *string { return &o.Kafka.TLSKey }},
	Mechanism:    func(o *Config) *string { return &o.Kafka.SASL },
	Username:     func(o *Config) *string { return &o.Kafka.SASLUser },
	PasswordFile: func(o *Config) *string { return &o.Kafka.SASLPasswordFile },
}

// checkKafka checks the --kafka-* settings (used when --kafka-brokers is set).
func (o *Config) checkKafka() error {
	k := &o.Kafka
	errs := []error{kafkaConn.Check(o)}
	if k.Topic == "" {
		errs = append(errs, cliconf.Invalid("--kafka-topic", "", errors.New("must not be empty")))
	}
	if k.Group == "" {
		errs = append(errs, cliconf.Invalid("--kafka-group", "", errors.New("must not be empty")))
	}
	if s := k.StartOffset; s != receiver.KafkaStartLatest && s != receiver.KafkaStartEarliest {
		errs = append(errs, cliconf.Invalid("--kafka-start-offset", s, errors.New("must be latest or earliest")))
	}
	if d := k.SessionTimeout; d < 6*time.Second || d > 30*time.Minute {
		errs = append(errs, cliconf.Invalid("--kafka-session-timeout", d.String(), errors.New("must be from 6s to 30m")))
	}
	return errors.Join(errs...)
}

package cliconf

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
)

// Option groups several binaries need, written once: each binary says
// where its configuration keeps the values (accessors, so that its struct
// keeps its shape) and gets the rows, with their names, usages and checks.

// ClientTLS is a TLS client's settings: --<Prefix>tls-ca, --<Prefix>tls-cert
// and --<Prefix>tls-key, and --<Prefix>tls when On is set (TLS with the
// system's roots, no file needed; any file implies it).
type ClientTLS[C any] struct {
	Prefix string // "kafka-", "otlp-", or "" for the agent's gRPC exporter
	Peer   string // whom the client talks to, for the help: "brokers"
	// CAUsage ends the CA row's help, e.g. " (default: the system's roots)".
	CAUsage       string
	On            func(*C) *bool // nil: no --<Prefix>tls switch
	CA, Cert, Key func(*C) *string
}

// Options are the group's rows.
func (g ClientTLS[C]) Options() []*Option[C] {
	p := g.Prefix
	var out []*Option[C]
	if g.On != nil {
		out = append(out, &Option[C]{Name: p + "tls", Arg: "bool", Default: "false", Bool: true,
			Usage: fmt.Sprintf("connect to the %s over TLS (implied by --%stls-ca, --%stls-cert, --%stls-key)", g.Peer, p, p, p),
			Set:   Bool(g.On)})
	}
	return append(out,
		&Option[C]{Name: p + "tls-ca", Arg: "file", Usage: "CA certificate to verify the " + g.Peer + g.CAUsage, Set: String(g.CA)},
		&Option[C]{Name: p + "tls-cert", Arg: "file", Usage: "client certificate for the " + g.Peer + "; needs --" + p + "tls-key", Set: String(g.Cert)},
		&Option[C]{Name: p + "tls-key", Arg: "file", Usage: "client key for the " + g.Peer + "; needs --" + p + "tls-cert", Set: String(g.Key)},
	)
}

// Check checks that the certificate and key come together and that every
// file given can be read.
func (g ClientTLS[C]) Check(c *C) error {
	p := g.Prefix
	var errs []error
	if (*g.Cert(c) == "") != (*g.Key(c) == "") {
		errs = append(errs, fmt.Errorf("--%stls-cert and --%stls-key must be given together", p, p))
	}
	for _, f := range []struct{ name, path string }{{"tls-ca", *g.CA(c)}, {"tls-cert", *g.Cert(c)}, {"tls-key", *g.Key(c)}} {
		errs = append(errs, CheckFile("--"+p+f.name, f.path))
	}
	return errors.Join(errs...)
}

// KafkaConn is how a client reaches Kafka brokers: --kafka-brokers, the
// brokers' TLS (--kafka-tls...) and SASL (--kafka-sasl-mechanism,
// --kafka-sasl-username, --kafka-sasl-password-file: the password in a file,
// so that no secret is on a command line). The agent's exporter and the
// collector's consumer share it; each adds its own --kafka-* rows.
type KafkaConn[C any] struct {
	BrokersUsage string // the brokers' row's help: what they are for
	Brokers      func(*C) *[]string
	TLS          ClientTLS[C] // its Prefix "kafka-", Peer "brokers"
	// Mechanism is none, plain or scram-sha-512.
	Mechanism, Username, PasswordFile func(*C) *string
}

// Options are the group's rows.
func (g KafkaConn[C]) Options() []*Option[C] {
	out := []*Option[C]{{Name: "kafka-brokers", Arg: "list", Usage: g.BrokersUsage,
		SetList: func(c *C, v []string) error { *g.Brokers(c) = v; return nil }}}
	out = append(out, g.TLS.Options()...)
	return append(out,
		&Option[C]{Name: "kafka-sasl-mechanism", Arg: "name", Default: "none",
			Usage: "SASL authentication to the brokers: none, plain or scram-sha-512", Set: String(g.Mechanism)},
		&Option[C]{Name: "kafka-sasl-username", Arg: "name",
			Usage: "SASL user name; required with --kafka-sasl-mechanism plain or scram-sha-512", Set: String(g.Username)},
		&Option[C]{Name: "kafka-sasl-password-file", Arg: "file",
			Usage: "file holding the SASL password (a trailing newline is ignored); required with a SASL mechanism", Set: String(g.PasswordFile)},
	)
}

// Check checks each broker's host:port, the TLS settings and the SASL
// combination (whether brokers are required is the binary's call).
func (g KafkaConn[C]) Check(c *C) error {
	var errs []error
	for _, b := range *g.Brokers(c) {
		errs = append(errs, CheckHostPort("--kafka-brokers", b))
	}
	errs = append(errs, g.TLS.Check(c), CheckFile("--kafka-sasl-password-file", *g.PasswordFile(c)))
	mech, user, pass := *g.Mechanism(c), *g.Username(c), *g.PasswordFile(c)
	switch mech {
	case "none":
		if user != "" || pass != "" {
			errs = append(errs, errors.New("--kafka-sasl-username and --kafka-sasl-password-file need --kafka-sasl-mechanism plain or scram-sha-512"))
		}
	case "plain", "scram-sha-512":
		if user == "" || pass == "" {
			errs = append(errs, fmt.Errorf("--kafka-sasl-mechanism %s needs --kafka-sasl-username and --kafka-sasl-password-file", mech))
		}
		if mech == "plain" && !g.usesTLS(c) {
			// PLAIN sends the password as is: anyone on the path reads it.
			errs = append(errs, errors.New("--kafka-sasl-mechanism plain sends the password in clear text: it needs TLS to the brokers (--kafka-tls, or --kafka-tls-ca); or use scram-sha-512"))
		}
	default:
		errs = append(errs, Invalid("--kafka-sasl-mechanism", mech, errors.New("must be none, plain or scram-sha-512")))
	}
	return errors.Join(errs...)
}

// usesTLS reports whether the connection is TLS: --kafka-tls or any of
// its files (as flowkafka.Conn.UsesTLS).
func (g KafkaConn[C]) usesTLS(c *C) bool {
	t := g.TLS
	return (t.On != nil && *t.On(c)) || *t.CA(c) != "" || *t.Cert(c) != "" || *t.Key(c) != ""
}

// CheckFile checks that path ("": not given) names a file that exists and
// is not a directory: at start-up, so that a typo fails then, naming the
// flag, rather than at the first connection, possibly minutes later.
func CheckFile(flagName, path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return Invalid(flagName, path, PathReason(err))
	}
	if fi.IsDir() {
		return Invalid(flagName, path, errors.New("is a directory, not a file"))
	}
	return nil
}

// CheckHostPort checks an address to connect to: a host and a port from 1
// to 65535.
func CheckHostPort(flagName, addr string) error {
	if err := SplitHostPort(addr); err != nil {
		return Invalid(flagName, addr, err)
	}
	host, port, _ := net.SplitHostPort(addr)
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return Invalid(flagName, addr, errors.New("port must be a number from 1 to 65535"))
	}
	if host == "" {
		return Invalid(flagName, addr, errors.New("must name a host"))
	}
	return nil
}

// MetricsServer is a server's metrics and health endpoint, the server TLS
// every flowlens server shares: --metrics-address (/metrics, /healthz and
// /readyz) and --web-config-file (TLS or mutual TLS from a Prometheus
// exporter-toolkit web configuration, served by internal/shared/httpserve).
type MetricsServer[C any] struct {
	Port int    // the default address's port (":Port": every address)
	Doc  string // the page on the metrics over TLS, e.g. "docs/metrics.md"
	// Address and WebConfigFile say where the configuration keeps them.
	Address, WebConfigFile func(*C) *string
}

// Options are the group's rows.
func (g MetricsServer[C]) Options() []*Option[C] {
	return []*Option[C]{
		{Name: "metrics-address", Arg: "host:port", Default: ":" + strconv.Itoa(g.Port),
			Usage: `address serving /metrics, /healthz and /readyz; "" disables`,
			Set:   String(g.Address)},
		{Name: "web-config-file", Arg: "file", Default: "",
			Usage: "Prometheus exporter-toolkit web configuration file: serve the metrics over TLS, optionally requiring client certificates (" + g.Doc + "); empty for plain HTTP",
			Set:   String(g.WebConfigFile)},
	}
}

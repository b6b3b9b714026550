package cliconf

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type kconf struct {
	Brokers                       []string
	TLS                           bool
	CA, Cert, Key                 string
	Mechanism, User, PasswordFile string
}

func kafkaGroup() KafkaConn[kconf] {
	return KafkaConn[kconf]{BrokersUsage: "brokers", Brokers: func(c *kconf) *[]string { return &c.Brokers },
		TLS: ClientTLS[kconf]{Prefix: "kafka-", Peer: "brokers", On: func(c *kconf) *bool { return &c.TLS },
			CA: func(c *kconf) *string { return &c.CA }, Cert: func(c *kconf) *string { return &c.Cert }, Key: func(c *kconf) *string { return &c.Key }},
		Mechanism: func(c *kconf) *string { return &c.Mechanism }, Username: func(c *kconf) *string { return &c.User },
		PasswordFile: func(c *kconf) *string { return &c.PasswordFile }}
}

// A group's rows load like any others, into the fields its accessors name,
// and its Check names the flags at fault.
func TestKafkaConn(t *testing.T) {
	g := kafkaGroup()
	var names []string
	for _, o := range g.Options() {
		names = append(names, o.Name)
	}
	want := []string{"kafka-brokers", "kafka-tls", "kafka-tls-ca", "kafka-tls-cert", "kafka-tls-key",
		"kafka-sasl-mechanism", "kafka-sasl-username", "kafka-sasl-password-file"}
	if !slices.Equal(names, want) {
		t.Errorf("rows %v, want %v", names, want)
	}
	pass := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(pass, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := &Spec[kconf]{Program: "toy", EnvPrefix: "TOY_", Options: g.Options(), Validate: g.Check}
	c, err := spec.Load([]string{"--kafka-brokers=a:9092,b:9093", "--kafka-sasl-mechanism=plain", "--kafka-sasl-username=u",
		"--kafka-sasl-password-file=" + pass}, env(map[string]string{"TOY_KAFKA_TLS": "true"}))
	if err != nil || !slices.Equal(c.Brokers, []string{"a:9092", "b:9093"}) || !c.TLS || c.Mechanism != "plain" || c.User != "u" || c.PasswordFile != pass {
		t.Errorf("got %+v, %v", c, err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--kafka-brokers=:9092"}, []string{`invalid --kafka-brokers ":9092": must name a host`}},
		{[]string{"--kafka-tls-cert=" + pass}, []string{"--kafka-tls-cert and --kafka-tls-key must be given together"}},
		{[]string{"--kafka-tls-ca=/nonexistent"}, []string{`invalid --kafka-tls-ca "/nonexistent": no such file or directory`}},
		{[]string{"--kafka-sasl-mechanism=plain", "--kafka-tls"}, []string{"--kafka-sasl-mechanism plain needs --kafka-sasl-username and --kafka-sasl-password-file"}},
		{[]string{"--kafka-sasl-mechanism=plain", "--kafka-sasl-username=u", "--kafka-sasl-password-file=" + pass},
			[]string{"--kafka-sasl-mechanism plain sends the password in clear text: it needs TLS to the brokers (--kafka-tls, or --kafka-tls-ca); or use scram-sha-512"}},
		{[]string{"--kafka-sasl-username=u"}, []string{"--kafka-sasl-username and --kafka-sasl-password-file need --kafka-sasl-mechanism plain or scram-sha-512"}},
		{[]string{"--kafka-sasl-mechanism=md5"}, []string{`invalid --kafka-sasl-mechanism "md5": must be none, plain or scram-sha-512`}},
	} {
		_, err := spec.Load(tc.args, nil)
		if err == nil || !slices.Equal(strings.Split(err.Error(), "\n"), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// Without a switch, a TLS client group has only its files.
func TestClientTLSWithoutSwitch(t *testing.T) {
	g := kafkaGroup().TLS
	g.Prefix, g.On = "", nil
	var names []string
	for _, o := range g.Options() {
		names = append(names, o.Name)
	}
	if want := []string{"tls-ca", "tls-cert", "tls-key"}; !slices.Equal(names, want) {
		t.Errorf("rows %v, want %v", names, want)
	}
}

type mconf struct{ addr, web string }

// TestMetricsServer: the group's two rows, their default address from the
// port, and the values they fill, from flags and the environment.
func TestMetricsServer(t *testing.T) {
	g := MetricsServer[mconf]{Port: 9400, Doc: "docs/x.md",
		Address:       func(c *mconf) *string { return &c.addr },
		WebConfigFile: func(c *mconf) *string { return &c.web }}
	spec := &Spec[mconf]{Program: "toy", EnvPrefix: "TOY_", Options: g.Options()}
	c, err := spec.Load(nil, env(nil))
	if err != nil || c.addr != ":9400" || c.web != "" {
		t.Errorf("defaults: got %+v, %v; want :9400 and no web config", c, err)
	}
	c, err = spec.Load([]string{"--metrics-address=127.0.0.1:1"}, env(map[string]string{"TOY_WEB_CONFIG_FILE": "w.yaml"}))
	if err != nil || c.addr != "127.0.0.1:1" || c.web != "w.yaml" {
		t.Errorf("got %+v, %v; want 127.0.0.1:1 and w.yaml", c, err)
	}
	if u := g.Options()[1].Usage; !strings.Contains(u, "(docs/x.md)") {
		t.Errorf("web-config-file's help %q does not name the page", u)
	}
}

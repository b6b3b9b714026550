package collector

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzConfigFile feeds the collector's configuration file (--config) any
// bytes: Load returns a configuration or an error, never panics. Seeds:
// every kind of option (lists, durations, the print filter, the history's
// bounds) and a few broken documents.
func FuzzConfigFile(f *testing.F) {
	for _, s := range []string{
		"", "{}", "[]", "null",
		"output: table\nmax_agents: -1\nmax_flows_per_batch: 500\nshutdown_grace: 3s\nport: [53, 443]\nip: 10.0.0.0/8,fd00::1\nproto: tcp",
		"history_size: 1000\nhistory_max_age: 5m\nhistory_max_filter_terms: 10\nhistory_max_followers: 2\nmax_streams_per_connection: 4",
		"subnet_labels: [corp=10.0.0.0/8, vpn=fd00::/8]\nk8s_enrich: false\nmetrics: [flows_total, rtt_seconds]",
		"kafka_brokers: [a:9092]\nkafka_topic: t\nkafka_session_timeout: 10s", "listen: \"127.0.0.1:0\"\nmetrics_address: \"\"",
		"a: &x [1]\nport: *x", "port: [[1]]", "output: {a: b}", "history_size: 1e99", "\t: bad", "port: !!binary AAAA",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "collector.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load([]string{"--config", path}, nil)
		if err == nil && c == nil {
			t.Fatal("no configuration and no error")
		}
		if err != nil && strings.TrimSpace(err.Error()) == "" {
			t.Fatal("an empty error")
		}
	})
}

package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzConfigFile feeds the agent's configuration file (--config) any bytes:
// Load returns a configuration or an error, never panics; an error from
// the file names it. Seeds: the example file, inline filter rules, every
// kind of value and a few broken documents.
func FuzzConfigFile(f *testing.F) {
	if b, err := os.ReadFile("testdata/agent.yaml"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		"", "{}", "[]", "null", "interfaces: [eth0, \"/^ens[0-9]+$/\"]\nsampling: 10",
		"filter_rules:\n  - action: accept\n    ports: 443\nfilter_default: reject",
		"otlp_headers: {authorization: Bearer x}\nexport: otlp\notlp_endpoint: localhost:4318",
		"features: [dns, drops]\ndns_ports: [53, 5353]", "a: &x [1]\nb: *x", "sampling: !!binary AAAA",
		"cache_active_timeout: 10s\ncache_active_timeout: 5s", "interfaces:\n  - [nested]", "\t: bad",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "agent.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load([]string{"--config", path}, withEnv(nil))
		if err == nil && c == nil {
			t.Fatal("no configuration and no error")
		}
		if err != nil && strings.TrimSpace(err.Error()) == "" {
			t.Fatal("an empty error")
		}
	})
}

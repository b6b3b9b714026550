package collector

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// The same settings from flags, FLOWLENS_COLLECTOR_* variables and a YAML
// file, with flags over the environment over the file; repeatable list
// flags add up, and replace the environment's and the file's lists.
func TestEnvAndFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "collector.yaml")
	if err := os.WriteFile(file, []byte(`output: table
max_agents: -1
max_flows_per_batch: 500
shutdown_grace: 3s
port: [53, 443]
proto: tcp
subnet_labels:
  - corp=10.0.0.0/8
metrics: [flow_bytes_total]
k8s_enrich: false
log_level: debug
`), 0o644); err != nil {
		t.Fatal(err)
	}
	type view struct {
		Output    string
		MaxAgents int
		MaxFlows  int
		Grace     time.Duration
		Ports     int
		Protos    int
		Subnets   string
		Metrics   []string
		Enrich    [2]bool // value, set
		Level     string
	}
	pick := func(c *Config) view {
		var ports, protos int
		if c.Print != nil {
			ports, protos = len(c.Print.Port), len(c.Print.Protocol)
		}
		enrich := [2]bool{}
		if e := c.Enrichment.Enable; e != nil {
			enrich = [2]bool{*e, true}
		}
		return view{c.Output, c.Limits.MaxStreams, c.Limits.MaxFlowsPerBatch, c.ShutdownGrace, ports, protos,
			c.Enrichment.Subnets.String(), c.Metrics.Enabled, enrich, c.LogLevel.String()}
	}
	defaults := view{"json", 4096, 100000, 10 * time.Second, 0, 0, "", nil, [2]bool{}, "INFO"}
	fromFile := view{"table", -1, 500, 3 * time.Second, 2, 1, "corp=10.0.0.0/8", []string{"flow_bytes_total"}, [2]bool{false, true}, "DEBUG"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want view
	}{
		{"defaults", nil, nil, defaults},
		{"file by flag", []string{"--config", file}, nil, fromFile},
		{"file by env", nil, map[string]string{"FLOWLENS_COLLECTOR_CONFIG": file}, fromFile},
		{"env over file", []string{"--config", file}, map[string]string{
			"FLOWLENS_COLLECTOR_OUTPUT":     "none",
			"FLOWLENS_COLLECTOR_MAX_AGENTS": "7",
			"FLOWLENS_COLLECTOR_PORT":       "80",
			"FLOWLENS_COLLECTOR_METRICS":    "none",
			"FLOWLENS_COLLECTOR_K8S_ENRICH": "auto",
		}, view{"none", 7, 500, 3 * time.Second, 1, 1, "corp=10.0.0.0/8", []string{}, [2]bool{}, "DEBUG"}},
		{"flags over env over file", []string{"--config", file, "-output", "json", "--port", "1", "--port", "2,3",
			"--max-agents=8", "--max-agents=9", "--k8s-enrich", "--metrics", "rtt_seconds", "--metrics", "flowlens_collector_sampling"},
			map[string]string{"FLOWLENS_COLLECTOR_OUTPUT": "none", "FLOWLENS_COLLECTOR_PORT": "80"},
			view{"json", 9, 500, 3 * time.Second, 3, 1, "corp=10.0.0.0/8", []string{"rtt_seconds", "flowlens_collector_sampling"}, [2]bool{true, true}, "DEBUG"}},
		{"--metrics= keeps only the health metrics", []string{"--metrics="}, nil,
			view{"json", 4096, 100000, 10 * time.Second, 0, 0, "", []string{}, [2]bool{}, "INFO"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A loopback --listen: the default (":9990" in plaintext) is
			// refused (options_check.go).
			o, err := Load(append([]string{"--listen=127.0.0.1:9990"}, tc.args...), func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if got := pick(o); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

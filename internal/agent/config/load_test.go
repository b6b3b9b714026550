package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/flowrules"
	"github.com/flowlens/flowlens/internal/shared/cliconf"
)

// envOf returns an env lookup function over m, so tests need no process state.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// baseEnv pins the node name so results do not depend on the test machine.
var baseEnv = map[string]string{"NODE_NAME": "node-1"}

func withEnv(extra map[string]string) func(string) string {
	m := map[string]string{}
	for k, v := range baseEnv {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return envOf(m)
}

func defaultConfig() *Config {
	c := &Config{
		ExcludeInterfaces:    []string{"lo"},
		Netns:                []string{"host"},
		NetnsDir:             "/var/run/netns",
		CacheActiveTimeout:   5 * time.Second,
		CacheMaxFlows:        100000,
		Sampling:             1,
		FilterDefault:        flowrules.Reject,
		Export:               []string{"stdout"},
		GRPCBatchSize:        1000,
		Capture:              true,
		CaptureMaxSnaplen:    128,
		ExportBuffer:         0,
		IPFIXTransport:       "udp",
		IPFIXDomainID:        1,
		IPFIXTemplateRefresh: time.Minute,
		OTLPProtocol:         "grpc",
		OTLPCompression:      "none",
		OTLPBatchFlows:       1000,
		Kafka:                defaultKafka(),
		Features:             []string{"drops", "rtt", "retransmits", "tcp"},
		FeatureOptions:       defaultFeatureOptions(),
		MetricsAddress:       ":9400",
		BPFStats:             true,
		NodeName:             "node-1",
		LogLevel:             slog.LevelInfo,
	}
	c.IPFIXEnterpriseNumber = 32473 // the documentation PEN
	return c
}

// checkDNSDefaults checks the features' options hold their defaults (the
// only feature with options is dns; this package cannot name its type, so
// they are compared as printed).
func checkDNSDefaults(t *testing.T, c *Config) {
	t.Helper()
	if got, want := fmt.Sprintf("%d %+v", len(c.FeatureOptions), c.FeatureOptions["dns"]), "1 &{Ports:[53] Timeout:5s NamesCacheSize:16384}"; got != want {
		t.Errorf("feature options %s, want %s", got, want)
	}
}

// defaultFeatureOptions are the features' options as the defaults set them.
func defaultFeatureOptions() map[string]any {
	c, err := Load(nil, withEnv(nil))
	if err != nil {
		panic(err)
	}
	return c.FeatureOptions
}

func defaultKafka() Kafka {
	return Kafka{Topic: "flowlens-flows", SASLMechanism: "none", Compression: "lz4", Linger: 50 * time.Millisecond,
		MaxBatchBytes: 1048576, Acks: "all", Message: "batch", BatchFlows: 1000}
}

func TestDefaults(t *testing.T) {
	got, err := Load(nil, withEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	checkDNSDefaults(t, got)
	if want := defaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestNodeNameFallsBackToHostname(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skip("no hostname")
	}
	got, err := Load(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.NodeName != host {
		t.Errorf("NodeName = %q, want hostname %q", got.NodeName, host)
	}
}

func TestExampleFile(t *testing.T) {
	got, err := Load([]string{"--config", "testdata/agent.yaml"}, withEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Interfaces:           []string{"eth0", "/^ens[0-9]{1,3}$/"},
		ExcludeInterfaces:    []string{"lo"},
		Netns:                []string{"host"},
		NetnsDir:             "/var/run/netns",
		CacheActiveTimeout:   10 * time.Second,
		CacheMaxFlows:        200000,
		Sampling:             10,
		FilterDefault:        flowrules.Reject,
		Export:               []string{"stdout", "grpc"},
		Target:               "collector.example.com:4317",
		TLS:                  true,
		GRPCBatchSize:        500,
		Capture:              true,
		CaptureMaxSnaplen:    128,
		ExportBuffer:         32,
		IPFIXTransport:       "udp",
		IPFIXDomainID:        1,
		IPFIXTemplateRefresh: time.Minute,
		OTLPProtocol:         "grpc",
		OTLPCompression:      "none",
		OTLPBatchFlows:       1000,
		Kafka:                defaultKafka(),
		Features:             []string{"drops", "rtt"},
		FeatureOptions:       defaultFeatureOptions(),
		MetricsAddress:       "127.0.0.1:9400",
		BPFStats:             false,
		NodeName:             "node-a",
		LogLevel:             slog.LevelDebug,
		ConfigFile:           "testdata/agent.yaml",
	}
	want.IPFIXEnterpriseNumber = 32473
	checkDNSDefaults(t, got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// TestPrecedence checks defaults < file < environment < flags, field by field.
func TestPrecedence(t *testing.T) {
	const file = "testdata/agent.yaml"
	type view struct {
		Sampling   uint32
		Timeout    time.Duration
		Interfaces []string
		Level      slog.Level
		Metrics    string
		Features   []string
		NodeName   string
	}
	pick := func(c *Config) view {
		return view{c.Sampling, c.CacheActiveTimeout, c.Interfaces, c.LogLevel, c.MetricsAddress, c.Features, c.NodeName}
	}
	fileView := view{10, 10 * time.Second, []string{"eth0", "/^ens[0-9]{1,3}$/"}, slog.LevelDebug, "127.0.0.1:9400", []string{"drops", "rtt"}, "node-a"}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want view
	}{
		{"defaults", nil, nil,
			view{1, 5 * time.Second, nil, slog.LevelInfo, ":9400", []string{"drops", "rtt", "retransmits", "tcp"}, "node-1"}},
		{"file by flag", []string{"--config", file}, nil, fileView},
		{"file by env", nil, map[string]string{"FLOWLENS_AGENT_CONFIG": file}, fileView},
		{"env over file", []string{"--config", file}, map[string]string{
			"FLOWLENS_AGENT_SAMPLING":             "20",
			"FLOWLENS_AGENT_CACHE_ACTIVE_TIMEOUT": "30s",
			"FLOWLENS_AGENT_INTERFACES":           "eth1,/^veth/",
			"FLOWLENS_AGENT_LOG_LEVEL":            "warn",
			"FLOWLENS_AGENT_FEATURES":             "none",
			"FLOWLENS_AGENT_NODE_NAME":            "node-env",
		}, view{20, 30 * time.Second, []string{"eth1", "/^veth/"}, slog.LevelWarn, "127.0.0.1:9400", nil, "node-env"}},
		{"flags over env over file", []string{
			"--config", file,
			"--sampling", "30",
			"--cache-active-timeout=1m",
			"-interfaces", "eth2",
			"--metrics-address=",
			"--features=rtt",
			"--node-name", "node-flag",
		}, map[string]string{
			"FLOWLENS_AGENT_SAMPLING":             "20",
			"FLOWLENS_AGENT_CACHE_ACTIVE_TIMEOUT": "30s",
			"FLOWLENS_AGENT_INTERFACES":           "eth1",
			"FLOWLENS_AGENT_LOG_LEVEL":            "warn",
			"FLOWLENS_AGENT_NODE_NAME":            "node-env",
		}, view{30, time.Minute, []string{"eth2"}, slog.LevelWarn, "", []string{"rtt"}, "node-flag"}},
		{"repeated flag: last wins", []string{"--sampling=2", "--sampling=3"}, nil,
			view{3, 5 * time.Second, nil, slog.LevelInfo, ":9400", []string{"drops", "rtt", "retransmits", "tcp"}, "node-1"}},
		{"--config flag over FLOWLENS_AGENT_CONFIG", []string{"--config", file},
			map[string]string{"FLOWLENS_AGENT_CONFIG": "testdata/missing.yaml"}, fileView},
		{"--config= turns off FLOWLENS_AGENT_CONFIG", []string{"--config="},
			map[string]string{"FLOWLENS_AGENT_CONFIG": file},
			view{1, 5 * time.Second, nil, slog.LevelInfo, ":9400", []string{"drops", "rtt", "retransmits", "tcp"}, "node-1"}},
		{"empty env var is unset", nil, map[string]string{"FLOWLENS_AGENT_METRICS_ADDRESS": ""},
			view{1, 5 * time.Second, nil, slog.LevelInfo, ":9400", []string{"drops", "rtt", "retransmits", "tcp"}, "node-1"}},
		{"FLOWLENS_AGENT_NODE_NAME over NODE_NAME", nil, map[string]string{"FLOWLENS_AGENT_NODE_NAME": "n2"},
			view{1, 5 * time.Second, nil, slog.LevelInfo, ":9400", []string{"drops", "rtt", "retransmits", "tcp"}, "n2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.args, withEnv(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if got := pick(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestListSyntax(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ,", nil},
		{"eth0", []string{"eth0"}},
		{" eth0 , eth1 ,", []string{"eth0", "eth1"}},
		{"/^eth[0-9]{1,2}$/,lo", []string{"/^eth[0-9]{1,2}$/", "lo"}},
		{"lo, /a,b/ , /c/", []string{"lo", "/a,b/", "/c/"}},
		{"/a/b/,c", []string{"/a/b/", "c"}},
		{"/unclosed,lo", []string{"/unclosed", "lo"}},
	}
	for _, tt := range tests {
		if got := cliconf.SplitList(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("cliconf.SplitList(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unknown flag", []string{"--nope"}, nil, "unknown flag --nope (--help lists them)"},
		{"missing value", []string{"--sampling"}, nil, "--sampling needs a value (n)"},
		{"positional", []string{"eth0"}, nil, `unexpected argument "eth0": flowlens-agent takes only flags (--help lists them)`},
		{"dns ports: too many", []string{"--dns-ports=1,2,3,4,5"}, nil, `invalid --dns-ports "1,2,3,4,5": must be 1 to 4 ports`},
		{"dns ports: zero", []string{"--dns-ports=0"}, nil, `invalid --dns-ports "0": port "0": must be a number from 1 to 65535`},
		{"dns ports: empty", []string{"--dns-ports="}, nil, `invalid --dns-ports "": must be 1 to 4 ports`},
		{"dns timeout", []string{"--dns-timeout=50ms"}, nil, `invalid --dns-timeout "50ms": must be from 100ms to 1m`},
		{"bad uint", []string{"--sampling=-1"}, nil,
			`invalid --sampling "-1": must be an integer from 1 to 4294967295`},
		{"bad int", []string{"--cache-max-flows", "lots"}, nil, `invalid --cache-max-flows "lots": must be an integer`},
		{"bad duration", []string{"--cache-active-timeout=5"}, nil,
			`invalid --cache-active-timeout "5": must be a duration such as 5s or 500ms`},
		{"bad bpf-stats", []string{"--bpf-stats=sometimes"}, nil,
			`invalid --bpf-stats "sometimes": must be on or off`},
		{"bad tc-attach", nil, map[string]string{"FLOWLENS_AGENT_TC_ATTACH": "tcx"},
			`invalid FLOWLENS_AGENT_TC_ATTACH "tcx": must be auto or clsact`},
		{"bad level", []string{"--log-level=verbose"}, nil,
			`invalid --log-level "verbose": must be one of debug, info, warn, error`},
		{"bad feature", []string{"--features=drops,jitter"}, nil,
			`invalid --features "drops,jitter": unknown feature "jitter": must be one of drops, rtt, retransmits, xlat, tls, dns, tcp, or none`},
		{"none with features", []string{"--features=none,rtt"}, nil,
			`invalid --features "none,rtt": "none" cannot be combined with features`},
		{"ipfix domain id", []string{"--ipfix-domain-id=4294967296"}, nil,
			`invalid --ipfix-domain-id "4294967296": must be an integer from 0 to 4294967295`},
		{"ipfix without target", []string{"--export=ipfix", "--ipfix-transport=tcp"}, nil,
			"--ipfix-target is required when --export includes ipfix"},
		{"ipfix refresh", []string{"--ipfix-template-refresh=1h1m"}, nil,
			`invalid --ipfix-template-refresh "1h1m0s": must be from 1s to 1h`},
		{"otlp without endpoint", []string{"--export=stdout,otlp"}, nil,
			"--otlp-endpoint is required when --export includes otlp"},
		{"otlp tls value", []string{"--otlp-tls=maybe"}, nil, `invalid --otlp-tls "maybe": must be true or false`},
		{"otlp header without =", []string{"--otlp-headers=a=1,token"}, nil,
			`invalid --otlp-headers "token": must be key=value`},
		{"otlp header name, value not shown", []string{"--otlp-headers=x y=s3cret"}, nil,
			`invalid --otlp-headers "x y": not a header name (letters, digits, - _ .)`},
		{"otlp batch", []string{"--otlp-batch-flows=0"}, nil, `invalid --otlp-batch-flows "0": must be from 1 to 100000`},
		{"ipfix enterprise number zero", []string{"--ipfix-enterprise-number=0"}, nil,
			`invalid --ipfix-enterprise-number "0": must be an integer from 1 to 4294967295`},
		{"ipfix enterprise number high", []string{"--ipfix-enterprise-number=4294967296"}, nil,
			`invalid --ipfix-enterprise-number "4294967296": must be an integer from 1 to 4294967295`},
		{"ipfix max message size", nil, map[string]string{"FLOWLENS_AGENT_IPFIX_MAX_MESSAGE_SIZE": "9000x"},
			`invalid FLOWLENS_AGENT_IPFIX_MAX_MESSAGE_SIZE "9000x": must be an integer`},
		{"bad env", nil, map[string]string{"FLOWLENS_AGENT_GRPC_BATCH_SIZE": "x"},
			`invalid FLOWLENS_AGENT_GRPC_BATCH_SIZE "x": must be an integer`},
		{"missing file by flag", []string{"--config=testdata/missing.yaml"}, nil,
			`invalid --config "testdata/missing.yaml": no such file or directory`},
		{"missing file by env", nil, map[string]string{"FLOWLENS_AGENT_CONFIG": "testdata/missing.yaml"},
			`invalid FLOWLENS_AGENT_CONFIG "testdata/missing.yaml": no such file or directory`},
		// Load runs Validate, whose errors name the flag whatever the source.
		{"validation", nil, map[string]string{"FLOWLENS_AGENT_SAMPLING": "0"}, `invalid --sampling "0": must be >= 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.args, withEnv(tt.env))
			if err == nil {
				t.Fatalf("no error, got %+v", c)
			}
			if err.Error() != tt.want {
				t.Errorf("error:\n got  %s\n want %s", err, tt.want)
			}
		})
	}
}

// TestOTLPFlags checks the otlp exporter's flags, as the operator renders
// them: --otlp-tls given without a value, headers holding "=" in values,
// and the same from the environment.
func TestOTLPFlags(t *testing.T) {
	got, err := Load([]string{"--export=otlp", "--otlp-endpoint=otel-collector.observability:4318", "--otlp-protocol=http",
		"--otlp-tls", "--otlp-headers=Authorization=Basic dXNlcjpwYXNz==, x-tenant=a", "--otlp-compression=gzip",
		"--otlp-batch-flows=250"}, withEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := defaultConfig()
	want.Export = []string{"otlp"}
	want.OTLPEndpoint, want.OTLPProtocol, want.OTLPTLS = "otel-collector.observability:4318", "http", true
	want.OTLPHeaders = map[string]string{"authorization": "Basic dXNlcjpwYXNz==", "x-tenant": "a"}
	want.OTLPCompression, want.OTLPBatchFlows = "gzip", 250
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if !got.OTLPTLSOn() {
		t.Error("OTLPTLSOn() = false with --otlp-tls")
	}

	got, err = Load(nil, withEnv(map[string]string{"FLOWLENS_AGENT_EXPORT": "otlp", "FLOWLENS_AGENT_OTLP_ENDPOINT": "10.0.0.1:4317",
		"FLOWLENS_AGENT_OTLP_TLS": "false", "FLOWLENS_AGENT_OTLP_HEADERS": "k=v"}))
	if err != nil {
		t.Fatal(err)
	}
	if got.OTLPEndpoint != "10.0.0.1:4317" || got.OTLPTLS || got.OTLPTLSOn() || !reflect.DeepEqual(got.OTLPHeaders, map[string]string{"k": "v"}) {
		t.Errorf("from the environment: %+v", got)
	}
}

// TestOTLPHeadersFile: the config file gives otlp_headers as a mapping or
// a list; a bad entry is reported at its line, by key (never the value).
func TestOTLPHeadersFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ yaml, err string }{
		{"otlp_headers:\n  Authorization: Bearer a=b\n  x-tenant: \"7\"\n", ""},
		{"otlp_headers: [\"Authorization=Bearer a=b\", \"x-tenant=7\"]\n", ""},
		{"otlp_headers:\n  ok: 1\n  bad key: s3cret\n", `%s:3: invalid otlp_headers "bad key": not a header name (letters, digits, - _ .)`},
		{"otlp_headers:\n  k: [a]\n", `%s:2: invalid otlp_headers: "k": must be a plain value`},
	} {
		path := filepath.Join(dir, "agent.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Load([]string{"--config", path}, withEnv(nil))
		if tc.err != "" {
			if want := fmt.Sprintf(tc.err, path); err == nil || err.Error() != want {
				t.Errorf("%q: error\n got  %v\n want %s", tc.yaml, err, want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
			continue
		}
		if want := map[string]string{"authorization": "Bearer a=b", "x-tenant": "7"}; !reflect.DeepEqual(c.OTLPHeaders, want) {
			t.Errorf("%q: headers %v, want %v", tc.yaml, c.OTLPHeaders, want)
		}
	}
}

func TestFileErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // %s is the file's path
	}{
		{"unknown key", "sampling: 2\ncache_timeout: 5s\n", `%s:2: unknown key "cache_timeout"`},
		{"config is not a key", "config: other.yaml\n", `%s:1: unknown key "config"`},
		{"flag spelling is not a key", "cache-max-flows: 5\n", `%s:1: unknown key "cache-max-flows"`},
		{"duplicate key", "sampling: 2\nsampling: 3\n", `%s:2: key "sampling" given twice`},
		{"bad value", "log_level: info\nsampling: often\n",
			`%s:2: invalid sampling "often": must be an integer from 1 to 4294967295`},
		{"list for scalar", "target: [a, b]\n", `%s:1: invalid target: must be a single value, not a list`},
		{"map in list", "export:\n  - {a: b}\n", `%s:2: invalid export: list entries must be plain values`},
		{"bad list entry", "features: [drops, nope]\n",
			`%s:1: invalid features "drops,nope": unknown feature "nope": must be one of drops, rtt, retransmits, xlat, tls, dns, tcp, or none`},
		{"not a mapping", "- sampling\n", `%s:1: the file must be a mapping of option names to values`},
		{"syntax", "sampling: [\n", `%s: yaml: line 1: did not find expected node content`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load([]string{"--config", path}, withEnv(nil))
			want := fmt.Sprintf(tt.want, path)
			if err == nil || err.Error() != want {
				t.Errorf("error:\n got  %v\n want %s", err, want)
			}
		})
	}
}

func TestFileForms(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want func(c *Config)
	}{
		{"empty file", "", func(c *Config) {}},
		{"comments only", "# nothing\n", func(c *Config) {}},
		{"null keeps default", "exclude_interfaces:\nsampling: ~\n", func(c *Config) {}},
		{"empty list", "exclude_interfaces: []\nfeatures: []\n", func(c *Config) {
			c.ExcludeInterfaces = nil
			c.Features = nil
		}},
		{"empty string", "metrics_address: \"\"\nfeatures: \"\"\n", func(c *Config) {
			c.MetricsAddress = ""
			c.Features = nil
		}},
		{"alias", "export_buffer: &n 7\ngrpc_batch_size: *n\n", func(c *Config) {
			c.ExportBuffer, c.GRPCBatchSize = 7, 7
		}},
		{"sequence with comma regex", "interfaces:\n  - /^eth[0-9]{1,2}$/\n  - \" wlan0 \"\n", func(c *Config) {
			c.Interfaces = []string{"/^eth[0-9]{1,2}$/", "wlan0"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Load([]string{"--config", path}, withEnv(nil))
			if err != nil {
				t.Fatal(err)
			}
			want := defaultConfig()
			want.ConfigFile = path
			tt.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		_, err := Load([]string{"--sampling=5", arg}, withEnv(nil))
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("Load(%q) error = %v, want flag.ErrHelp", arg, err)
		}
	}
}

func TestUsage(t *testing.T) {
	var b bytes.Buffer
	Usage(&b)
	out := b.String()
	for _, want := range []string{
		"Usage: flowlens-agent [flags]",
		"--config file",
		"\nFlow cache:\n" + `  --cache-active-timeout duration  how often flows are evicted from the kernel (100ms to 1h) (default "5s")`,
		`(default "drops,rtt,retransmits,tcp")`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	// Every option is listed under the heading of its component.
	for _, o := range options {
		if o.Section == "" {
			t.Errorf("--%s has no section", o.Name)
			continue
		}
		heading := strings.Index(out, "\n"+o.Section+":\n")
		row := strings.Index(out, "\n  --"+o.Name+" ")
		if heading < 0 || row < heading || strings.Contains(out[heading+1:row], "\n\n") {
			t.Errorf("usage lacks --%s under %q", o.Name, o.Section)
		}
	}
}

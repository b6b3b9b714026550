package config

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/flowrules"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name   string
		change func(c *Config)
		want   string // "" means valid
	}{
		{"defaults", func(c *Config) {}, ""},

		{"interfaces regex", func(c *Config) { c.Interfaces = []string{"eth0", "/^eth[/"} },
			"invalid --interfaces \"/^eth[/\": error parsing regexp: missing closing ]: `[`"},
		{"interfaces unclosed pattern", func(c *Config) { c.Interfaces = []string{"/eth"} },
			`invalid --interfaces "/eth": a pattern must be written /regex/`},
		{"exclude regex", func(c *Config) { c.ExcludeInterfaces = []string{"/a(/"} },
			"invalid --exclude-interfaces \"/a(/\": error parsing regexp: missing closing ): `a(`"},
		{"interfaces patterns ok", func(c *Config) { c.Interfaces = []string{"/^veth/", "eth0", "//"} }, ""},

		{"netns empty", func(c *Config) { c.Netns = nil },
			`invalid --netns "": must list "host", "all" or namespace names`},
		{"netns all with names", func(c *Config) { c.Netns = []string{"all", "blue"} },
			`invalid --netns "all,blue": "all" cannot be combined with namespace names`},
		{"netns path", func(c *Config) { c.Netns = []string{"host", "../etc"} },
			`invalid --netns "../etc": must be a namespace name under --netns-dir, not a path`},
		{"netns dotdot", func(c *Config) { c.Netns = []string{".."} },
			`invalid --netns "..": must be a namespace name under --netns-dir, not a path`},
		{"netns-dir empty", func(c *Config) { c.Netns = []string{"all"}; c.NetnsDir = "" },
			`invalid --netns-dir "": must be set to watch named namespaces`},
		{"netns-dir unused", func(c *Config) { c.NetnsDir = "" }, ""},
		{"netns host and all", func(c *Config) { c.Netns = []string{"host", "all"} }, ""},
		{"netns names", func(c *Config) { c.Netns = []string{"host", "blue", "red"} }, ""},

		{"timeout low", func(c *Config) { c.CacheActiveTimeout = 99 * time.Millisecond },
			`invalid --cache-active-timeout "99ms": must be from 100ms to 1h`},
		{"timeout high", func(c *Config) { c.CacheActiveTimeout = time.Hour + time.Second },
			`invalid --cache-active-timeout "1h0m1s": must be from 100ms to 1h`},
		{"timeout bounds", func(c *Config) { c.CacheActiveTimeout = 100 * time.Millisecond }, ""},
		{"timeout upper bound", func(c *Config) { c.CacheActiveTimeout = time.Hour }, ""},

		{"max flows low", func(c *Config) { c.CacheMaxFlows = 0 },
			`invalid --cache-max-flows "0": must be from 1 to 10000000`},
		{"max flows high", func(c *Config) { c.CacheMaxFlows = 10_000_001 },
			`invalid --cache-max-flows "10000001": must be from 1 to 10000000`},
		{"max flows bounds", func(c *Config) { c.CacheMaxFlows = 10_000_000 }, ""},

		{"sampling", func(c *Config) { c.Sampling = 0 }, `invalid --sampling "0": must be >= 1`},

		{"filter default unset", func(c *Config) { c.FilterDefault = 0 },
			`invalid --filter-default "": must be accept or reject`},
		{"filter rules checked", func(c *Config) {
			c.FilterRules = []flowrules.Rule{{Action: flowrules.Accept}, {Name: "x", Sampling: 10}}
		}, `filter rule 1 ("x"): action: is required: accept or reject`},
		{"filter rules ok", func(c *Config) {
			c.FilterRules = []flowrules.Rule{{Action: flowrules.Accept, Sampling: 10}}
			c.FilterDefault = flowrules.Accept
		}, ""},

		{"export empty", func(c *Config) { c.Export = nil },
			`invalid --export "": must list at least one of stdout, grpc, ipfix, kafka, otlp`},
		{"export unknown", func(c *Config) { c.Export = []string{"stdout", "nosuch"} },
			`invalid --export "nosuch": unknown exporter: must be one of stdout, grpc, ipfix, kafka, otlp`},
		{"export duplicate", func(c *Config) { c.Export = []string{"stdout", "stdout"} },
			`invalid --export "stdout,stdout": "stdout" is listed twice`},

		{"target required", func(c *Config) { c.Export = []string{"grpc"} },
			`--target is required when --export includes grpc`},
		{"target no port", func(c *Config) { c.Export = []string{"grpc"}; c.Target = "collector" },
			`invalid --target "collector": missing port in address`},
		{"target port zero", func(c *Config) { c.Export = []string{"grpc"}; c.Target = "collector:0" },
			`invalid --target "collector:0": port must be a number from 1 to 65535`},
		{"target port high", func(c *Config) { c.Target = "[::1]:65536" },
			`invalid --target "[::1]:65536": port must be a number from 1 to 65535`},
		{"target port name", func(c *Config) { c.Target = "collector:grpc" },
			`invalid --target "collector:grpc": port must be a number from 1 to 65535`},
		{"target ok", func(c *Config) { c.Export = []string{"stdout", "grpc"}; c.Target = "[::1]:4317" }, ""},
		// Plaintext only on loopback unless asked for (issue #27).
		{"plaintext to a remote target", func(c *Config) { c.Export = []string{"grpc"}; c.Target = "collector.flowlens.svc:9990" },
			`invalid --target "collector.flowlens.svc:9990": is not a loopback address: export over TLS (--tls, --tls-ca), or give --insecure-plaintext to send flows in plaintext that anyone on the path can read and forge`},
		{"plaintext to a remote address", func(c *Config) { c.Export = []string{"grpc"}; c.Target = "10.0.0.1:9990" },
			`invalid --target "10.0.0.1:9990": is not a loopback address: export over TLS (--tls, --tls-ca), or give --insecure-plaintext to send flows in plaintext that anyone on the path can read and forge`},
		{"plaintext to localhost", func(c *Config) { c.Export = []string{"grpc"}; c.Target = "localhost:9990" }, ""},
		{"plaintext asked for", func(c *Config) { c.Export = []string{"grpc"}; c.Target = "10.0.0.1:9990"; c.InsecurePlaintext = true }, ""},
		{"tls with the system's roots", func(c *Config) { c.Export = []string{"grpc"}; c.Target = "10.0.0.1:9990"; c.TLS = true }, ""},
		{"remote target unused", func(c *Config) { c.Export = []string{"stdout"}; c.Target = "10.0.0.1:9990" }, ""},
		{"token in plaintext", func(c *Config) { c.Export = []string{"grpc"}; c.Target = "127.0.0.1:9990"; c.TokenFile = file },
			`--token-file needs --tls: the token would cross the network in plaintext (--insecure-plaintext allows it, for tests)`},
		{"token in plaintext asked for", func(c *Config) {
			c.Export = []string{"grpc"}
			c.Target, c.TokenFile, c.InsecurePlaintext = "127.0.0.1:9990", file, true
		}, ""},
		{"token over tls", func(c *Config) {
			c.Export = []string{"grpc"}
			c.Target = "10.0.0.1:9990"
			c.TokenFile = file
			c.TLS = true
		}, ""},
		{"token file missing", func(c *Config) { c.TokenFile = missing },
			`invalid --token-file "` + missing + `": no such file or directory`},

		{"ipfix target missing", func(c *Config) { c.Export = []string{"stdout", "ipfix"} },
			"--ipfix-target is required when --export includes ipfix"},
		{"ipfix target no port", func(c *Config) { c.Export = []string{"ipfix"}; c.IPFIXTarget = "collector" },
			`invalid --ipfix-target "collector": missing port in address`},
		{"ipfix target port", func(c *Config) { c.IPFIXTarget = "collector:ipfix" },
			`invalid --ipfix-target "collector:ipfix": port must be a number from 1 to 65535`},
		{"ipfix target no host", func(c *Config) { c.IPFIXTarget = ":4739" },
			`invalid --ipfix-target ":4739": must name a host`},
		{"ipfix transport", func(c *Config) { c.IPFIXTransport = "sctp" },
			`invalid --ipfix-transport "sctp": must be udp or tcp`},
		{"ipfix refresh low", func(c *Config) { c.IPFIXTemplateRefresh = 999 * time.Millisecond },
			`invalid --ipfix-template-refresh "999ms": must be from 1s to 1h`},
		{"ipfix refresh high", func(c *Config) { c.IPFIXTemplateRefresh = 2 * time.Hour },
			`invalid --ipfix-template-refresh "2h0m0s": must be from 1s to 1h`},
		{"ipfix message size low", func(c *Config) { c.IPFIXMaxMessageSize = 1023 },
			`invalid --ipfix-max-message-size "1023": must be 0 (the default) or from 1024 to 65507 over udp`},
		{"ipfix message size over UDP", func(c *Config) { c.IPFIXMaxMessageSize = 65508 },
			`invalid --ipfix-max-message-size "65508": must be 0 (the default) or from 1024 to 65507 over udp`},
		{"ipfix message size over TCP", func(c *Config) { c.IPFIXTransport, c.IPFIXMaxMessageSize = "tcp", 65536 },
			`invalid --ipfix-max-message-size "65536": must be 0 (the default) or from 1024 to 65535 over tcp`},
		{"ipfix message size TCP max", func(c *Config) { c.IPFIXTransport, c.IPFIXMaxMessageSize = "tcp", 65535 }, ""},
		{"ipfix message size UDP", func(c *Config) { c.IPFIXMaxMessageSize = 1024 }, ""},
		{"ipfix enterprise number", func(c *Config) { c.IPFIXEnterpriseNumber = 0 },
			`invalid --ipfix-enterprise-number "0": must be an integer from 1 to 4294967295`},
		{"ipfix ok", func(c *Config) {
			c.Export = []string{"grpc", "ipfix"}
			c.Target, c.IPFIXTarget, c.IPFIXTransport, c.IPFIXDomainID = "127.0.0.1:1", "[::1]:4739", "tcp", 4294967295
		}, ""},

		{"otlp endpoint missing", func(c *Config) { c.Export = []string{"otlp"} },
			"--otlp-endpoint is required when --export includes otlp"},
		{"otlp endpoint no host", func(c *Config) { c.OTLPEndpoint = ":4317" },
			`invalid --otlp-endpoint ":4317": must name a host`},
		{"otlp endpoint port", func(c *Config) { c.OTLPEndpoint = "otel:otlp" },
			`invalid --otlp-endpoint "otel:otlp": port must be a number from 1 to 65535`},
		{"otlp protocol", func(c *Config) { c.OTLPProtocol = "http/json" },
			`invalid --otlp-protocol "http/json": must be grpc or http`},
		{"otlp compression", func(c *Config) { c.OTLPCompression = "zstd" },
			`invalid --otlp-compression "zstd": must be none or gzip`},
		{"otlp batch high", func(c *Config) { c.OTLPBatchFlows = 100_001 },
			`invalid --otlp-batch-flows "100001": must be from 1 to 100000`},
		{"otlp cert without key", func(c *Config) { c.OTLPTLSCert = file },
			`--otlp-tls-cert and --otlp-tls-key must be given together`},
		{"otlp ca missing", func(c *Config) { c.OTLPTLSCA = missing },
			`invalid --otlp-tls-ca "` + missing + `": no such file or directory`},
		{"otlp ok", func(c *Config) {
			c.Export = []string{"stdout", "otlp"}
			c.OTLPEndpoint, c.OTLPProtocol, c.OTLPCompression = "[::1]:4318", "http", "gzip"
			c.OTLPTLSCA, c.OTLPTLSCert, c.OTLPTLSKey = file, file, file
		}, ""},

		{"batch size low", func(c *Config) { c.GRPCBatchSize = 0 },
			`invalid --grpc-batch-size "0": must be from 1 to 100000`},
		{"batch size high", func(c *Config) { c.GRPCBatchSize = 100_001 },
			`invalid --grpc-batch-size "100001": must be from 1 to 100000`},
		{"export buffer low", func(c *Config) { c.ExportBuffer = -1 },
			`invalid --export-buffer "-1": must be from 0 to 100000`},
		{"export buffer high", func(c *Config) { c.ExportBuffer = 100_001 },
			`invalid --export-buffer "100001": must be from 0 to 100000`},

		{"tls cert without key", func(c *Config) { c.TLSCert = file },
			`--tls-cert and --tls-key must be given together`},
		{"tls key without cert", func(c *Config) { c.TLSKey = file },
			`--tls-cert and --tls-key must be given together`},
		{"tls ca missing", func(c *Config) { c.TLSCA = missing },
			`invalid --tls-ca "` + missing + `": no such file or directory`},
		{"tls key missing", func(c *Config) { c.TLSCert = file; c.TLSKey = missing },
			`invalid --tls-key "` + missing + `": no such file or directory`},
		{"tls cert is dir", func(c *Config) { c.TLSCert = dir; c.TLSKey = file },
			`invalid --tls-cert "` + dir + `": is a directory, not a file`},
		{"tls ok", func(c *Config) { c.TLSCA, c.TLSCert, c.TLSKey = file, file, file }, ""},

		{"metrics address", func(c *Config) { c.MetricsAddress = "9400" },
			`invalid --metrics-address "9400": missing port in address`},
		{"metrics disabled", func(c *Config) { c.MetricsAddress = "" }, ""},
		{"web config missing", func(c *Config) { c.WebConfigFile = missing },
			`invalid --web-config-file "` + missing + `": open ` + missing + `: no such file or directory`},
		{"web config not a web config", func(c *Config) { c.WebConfigFile = file },
			`invalid --web-config-file "` + file + "\": yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str `x` into web.Config"},

		{"node name", func(c *Config) { c.NodeName = "" },
			`invalid --node-name "": must not be empty; set it or NODE_NAME`},
		{"node name too long", func(c *Config) { c.NodeName = strings.Repeat("n", 254) },
			`invalid --node-name "` + strings.Repeat("n", 254) + `": must be at most 253 bytes, as Kubernetes node names are`},

		{"capture max snaplen", func(c *Config) { c.CaptureMaxSnaplen = 0 },
			`invalid --capture-max-snaplen "0": must be from 1 to 65000`},
		{"capture max snaplen too big", func(c *Config) { c.CaptureMaxSnaplen = 65001 },
			`invalid --capture-max-snaplen "65001": must be from 1 to 65000`},
		{"capture max snaplen largest", func(c *Config) { c.CaptureMaxSnaplen = 65000; c.Capture = false }, ""},

		{"log level", func(c *Config) { c.LogLevel = slog.LevelInfo + 2 },
			`invalid --log-level "INFO+2": must be one of debug, info, warn, error`},
		{"log level error", func(c *Config) { c.LogLevel = slog.LevelError }, ""},

		{"all problems reported", func(c *Config) { c.Sampling = 0; c.Export = []string{"grpc"} },
			"invalid --sampling \"0\": must be >= 1\n--target is required when --export includes grpc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaultConfig()
			tt.change(c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.want != "" && err == nil:
				t.Errorf("no error, want %s", tt.want)
			case tt.want != "" && err.Error() != tt.want:
				t.Errorf("error:\n got  %s\n want %s", err, tt.want)
			}
		})
	}
}

func TestExportQueueBatches(t *testing.T) {
	for _, tc := range []struct{ buffer, maxFlows, batch, want int }{
		{0, 100000, 1000, DefaultExportBuffer},
		{0, 10, 1000, DefaultExportBuffer},
		{1, 100000, 1000, 1},
		{64, 100000, 1000, 64},
	} {
		c := Config{ExportBuffer: tc.buffer, CacheMaxFlows: tc.maxFlows, GRPCBatchSize: tc.batch}
		if got := c.ExportQueueBatches(); got != tc.want {
			t.Errorf("%+v: %d batches, want %d", tc, got, tc.want)
		}
	}
}

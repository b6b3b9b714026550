package render

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
)

// TestRenderedDefaults: what the operator writes into the agent's
// configuration for a spec that leaves a field unset is the agent's own
// default. For each exporter, a spec naming only what the exporter requires
// is rendered and loaded by the agent's loader, which refuses a key that is
// not one of its options; the result must equal the agent's defaults but for
// the fields the spec set. A default the operator restated differently (the
// Kafka linger, the OTLP batch, the metrics port...) fails here.
func TestRenderedDefaults(t *testing.T) {
	defaults, err := config.Load(nil, func(k string) string { return map[string]string{"NODE_NAME": "node-1"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec v1alpha1.FlowCollectorSpec
		set  func(c *config.Config) // what the spec sets
	}{
		// The default metrics TLS (mountedFiles moved the web
		// configuration's path to a temporary file).
		{"stdout", v1alpha1.FlowCollectorSpec{}, func(c *config.Config) { c.WebConfigFile = "web-config.yml" }},
		{"grpc", exporters(v1alpha1.Exporter{Type: v1alpha1.ExporterGRPC, GRPC: &v1alpha1.GRPCExporter{TargetHost: "c", TargetPort: 9990}}),
			// The secure default: TLS with the operator's CA bundle, and
			// the token (mountedFiles moved both paths to temporary files).
			func(c *config.Config) {
				c.Export, c.Target, c.TLS, c.TLSCA, c.TokenFile = []string{"grpc"}, "c:9990", true, "ca.crt", "token"
			}},
		{"grpc plaintext", exporters(v1alpha1.Exporter{Type: v1alpha1.ExporterGRPC, GRPC: &v1alpha1.GRPCExporter{TargetHost: "c", TargetPort: 9990, InsecurePlaintext: true}}),
			func(c *config.Config) { c.Export, c.Target, c.InsecurePlaintext = []string{"grpc"}, "c:9990", true }},
		{"ipfix", exporters(v1alpha1.Exporter{Type: v1alpha1.ExporterIPFIX, IPFIX: &v1alpha1.IPFIXExporter{TargetHost: "i", TargetPort: 4739}}),
			func(c *config.Config) { c.Export, c.IPFIXTarget = []string{"ipfix"}, "i:4739" }},
		{"kafka", exporters(v1alpha1.Exporter{Type: v1alpha1.ExporterKafka, Kafka: &v1alpha1.KafkaExporter{Brokers: []string{"k:9092"}}}),
			func(c *config.Config) { c.Export, c.Kafka.Brokers = []string{"kafka"}, []string{"k:9092"} }},
		{"otlp", exporters(v1alpha1.Exporter{Type: v1alpha1.ExporterOTLP, OTLP: &v1alpha1.OTLPExporter{TargetHost: "o", TargetPort: 4317}}),
			func(c *config.Config) { c.Export, c.OTLPEndpoint = []string{"otlp"}, "o:4317" }},
	} {
		got := loadAgentConfig(t, tc.spec)
		want := *defaults
		tc.set(&want)
		want.ConfigFile = got.ConfigFile
		for _, f := range []struct{ got, want *string }{{&got.TLSCA, &want.TLSCA}, {&got.TokenFile, &want.TokenFile}, {&got.WebConfigFile, &want.WebConfigFile}} {
			if *f.want != "" && filepath.Base(*f.got) == *f.want {
				*f.want = *f.got // the temporary file standing for the mounted one
			}
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("%s: the agent's configuration from the operator's defaults\n got  %+v\n want %+v", tc.name, *got, want)
		}
	}
}

// TestRenderedEnv: every variable the operator sets in the agent's
// container, but NODE_NAME (the agent's own fallback for --node-name), is
// one of the agent's options' variables.
func TestRenderedEnv(t *testing.T) {
	spec := exporters(
		v1alpha1.Exporter{Type: v1alpha1.ExporterKafka, Kafka: fullKafka},
		v1alpha1.Exporter{Type: v1alpha1.ExporterOTLP, OTLP: &v1alpha1.OTLPExporter{TargetHost: "o", TargetPort: 4317,
			HeadersSecretRef: &v1alpha1.SecretRef{Name: "otel-auth"}}})
	var names []string
	for _, c := range build(t, spec).DaemonSet.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			names = append(names, *e.Name)
		}
	}
	options := map[string]bool{}
	for _, o := range config.Options() {
		options[o.EnvName(config.EnvPrefix)] = true
	}
	found := 0
	for _, n := range names {
		switch {
		case n == "NODE_NAME":
		case n == HostIPEnv: // the node's address, expanded in the metrics address's variable
		case !strings.HasPrefix(n, config.EnvPrefix) || !options[n]:
			t.Errorf("the agent's container sets %s, which is no option of the agent", n)
		default:
			found++
		}
	}
	if found != 3 {
		t.Errorf("%d option variables in %v, want the metrics address's, the Kafka username's and the OTLP headers'", found, names)
	}
}

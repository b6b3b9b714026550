package collector_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/collector"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// TestOperatorArgs: the flags the operator gives its Kafka collector are
// options of this table, and those it writes without the FlowCollector
// asking (the consumer group, the metrics address) are this table's
// defaults, which render imports (DefaultKafkaGroup, DefaultMetricsPort):
// loading the operator's flags must give the defaults but for the brokers
// the spec names and --output=none (the operator's collector counts, it
// does not print). The topic is the agent's default (render), which must
// be the collector's too. An external test: render imports this
// package.
func TestOperatorArgs(t *testing.T) {
	fc := render.WithDefaults(v1alpha1.FlowCollectorSpec{Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterKafka,
		Kafka: &v1alpha1.KafkaExporter{Brokers: []string{"k:9092"}}}}})
	k := fc.Exporters[0].Kafka
	// The defaults but --listen, whose default (:9990 without TLS) the
	// collector refuses.
	defaults, err := collector.Load([]string{"--listen="}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Metrics in plain HTTP here (the web configuration is checked with
	// its files in package render).
	got, err := collector.Load(render.CollectorArgs(k, false, false), nil)
	if err != nil {
		t.Fatalf("the collector refuses the operator's flags: %v", err)
	}
	want := *defaults
	// No gRPC API: a Kafka collector serves nothing but its metrics.
	want.Kafka.Brokers, want.Output = k.Brokers, collector.OutputNone
	// The service map on the pod's loopback, every call authorized.
	want.UI.Listen, want.Auth = "127.0.0.1:9402", collector.AuthKubernetes
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("the collector's configuration from the operator's flags\n got  %+v\n want %+v", *got, want)
	}

	// spec.collector.serveGRPC: the gRPC API over TLS (the mounted
	// certificate, here files of the test's), every call authorized.
	dir := t.TempDir()
	var args []string
	for _, a := range render.CollectorArgs(k, false, true) {
		for _, p := range []string{render.CollectorTLSCertPath, render.CollectorTLSKeyPath} {
			if f := filepath.Join(dir, filepath.Base(p)); strings.HasSuffix(a, "="+p) {
				if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
				a = strings.TrimSuffix(a, p) + f
			}
		}
		args = append(args, a)
	}
	if got, err = collector.Load(args, nil); err != nil {
		t.Fatalf("the collector refuses the operator's flags with serveGRPC: %v", err)
	}
	if got.Listen != ":9990" || filepath.Base(got.TLSCert) != "tls.crt" || filepath.Base(got.TLSKey) != "tls.key" || got.Auth != collector.AuthKubernetes {
		t.Errorf("serveGRPC: listen %q, cert %q, key %q, auth %q", got.Listen, got.TLSCert, got.TLSKey, got.Auth)
	}

	// The variables the operator sets (from Secrets) are options' too.
	fc.Exporters[0].Kafka.SASL = &v1alpha1.KafkaSASL{Mechanism: v1alpha1.KafkaSASLPlain, SecretRef: v1alpha1.SecretRef{Name: "kafka-user"}}
	objs, err := render.Build(&v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName, UID: "u"}, Spec: fc},
		render.Options{DefaultImage: "agent:1", DefaultCollectorImage: "collector:1"})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, o := range collector.Spec.Options {
		names[o.EnvName(collector.Spec.EnvPrefix)] = true
	}
	n := 0
	for _, c := range objs.Collector.Deployment.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if n++; !names[*e.Name] {
				t.Errorf("the operator sets %s in the collector's container, which is no option of the collector", *e.Name)
			}
		}
	}
	if n == 0 {
		t.Error("no variable in the collector's container: the SASL username should be one")
	}
}

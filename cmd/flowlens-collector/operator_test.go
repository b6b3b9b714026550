package main

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// TestOperatorArgs: the flags the operator gives its Kafka collector are
// options of this table, and those it writes without the FlowCollector
// asking (the consumer group, the metrics address) are this collector's
// defaults: render cannot import this package main, so this test keeps its
// copies true. Only the brokers the spec names and --output=none (the
// operator's collector counts, it does not print) differ.
func TestOperatorArgs(t *testing.T) {
	fc := render.WithDefaults(v1alpha1.FlowCollectorSpec{Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterKafka,
		Kafka: &v1alpha1.KafkaExporter{Brokers: []string{"k:9092"}}}}})
	defaults, err := parseFlags(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseFlags(render.CollectorArgs(fc.Exporters[0].Kafka, nil), nil)
	if err != nil {
		t.Fatalf("the collector refuses the operator's flags: %v", err)
	}
	want := *defaults
	want.kafka.Brokers, want.output = []string{"k:9092"}, "none"
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("the collector's configuration from the operator's flags\n got  %+v\n want %+v", *got, want)
	}

	// The variables the operator sets (from Secrets) are options' too.
	fc.Exporters[0].Kafka.SASL = &v1alpha1.KafkaSASL{Mechanism: v1alpha1.KafkaSASLPlain, SecretRef: v1alpha1.SecretRef{Name: "kafka-user"}}
	objs, err := render.Build(&v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName, UID: "u"}, Spec: fc},
		render.Options{DefaultImage: "agent:1", DefaultCollectorImage: "collector:1"})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, o := range spec.Options {
		names[o.EnvName(spec.EnvPrefix)] = true
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

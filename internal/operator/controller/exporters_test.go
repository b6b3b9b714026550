package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// The kafka and otlp exporters and the Kafka collector, against the real
// API server (schema and CEL) and the reconciler.

func kafkaExporter(k *v1alpha1.KafkaExporter) []v1alpha1.Exporter {
	return []v1alpha1.Exporter{{Type: v1alpha1.ExporterKafka, Kafka: k}}
}

func otlpExporter(o *v1alpha1.OTLPExporter) []v1alpha1.Exporter {
	return []v1alpha1.Exporter{{Type: v1alpha1.ExporterOTLP, OTLP: o}}
}

// TestExporterSchemaRejects: the schema refuses bad kafka, otlp and
// spec.collector values with these messages.
func TestExporterSchemaRejects(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	brokers := []string{"kafka:9092"}
	cases := []struct {
		name   string
		change func(*v1alpha1.FlowCollector)
		want   string
	}{
		{"kafka without its settings", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterKafka}}
		}, "spec.exporters[0]: Invalid value: kafka must be set for, and only for, type kafka"},
		{"kafka settings on grpc", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterGRPC,
				GRPC:  &v1alpha1.GRPCExporter{TargetHost: "c", TargetPort: 9990},
				Kafka: &v1alpha1.KafkaExporter{Brokers: brokers}}}
		}, "spec.exporters[0]: Invalid value: kafka must be set for, and only for, type kafka"},
		{"kafka no brokers", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: []string{}})
		}, "spec.exporters[0].kafka.brokers: Invalid value: 0: spec.exporters[0].kafka.brokers in body should have at least 1 items"},
		{"kafka broker without port", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: []string{"kafka:9092", "kafka-1"}})
		}, "spec.exporters[0].kafka.brokers: Invalid value: each broker is host:port, e.g. kafka-0.kafka.kafka.svc:9092 or [fd00::1]:9092"},
		{"kafka broker url", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: []string{"kafka://kafka:9092"}})
		}, "each broker is host:port"},
		{"kafka brokers as one list", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: []string{"kafka-0:9092,kafka-1:9092"}})
		}, "each broker is host:port"},
		{"kafka topic", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: brokers, Topic: "flows/all"})
		}, `spec.exporters[0].kafka.topic in body should match '^[a-zA-Z0-9._-]+$'`},
		{"kafka compression", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: brokers, Compression: "snappy"})
		}, `spec.exporters[0].kafka.compression: Unsupported value: "snappy": supported values: "none", "lz4", "zstd"`},
		{"kafka acks", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: brokers, Acks: "1"})
		}, `spec.exporters[0].kafka.acks: Unsupported value: "1": supported values: "all", "leader", "none"`},
		{"kafka message", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: brokers, Message: "record"})
		}, `spec.exporters[0].kafka.message: Unsupported value: "record": supported values: "batch", "flow"`},
		{"kafka linger", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: brokers, Linger: &metav1.Duration{Duration: 2 * time.Minute}})
		}, `spec.exporters[0].kafka.linger: Invalid value: "2m0s": must be a duration from 0s to 1m`},
		{"kafka max batch bytes", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: brokers, MaxBatchBytes: 100})
		}, "spec.exporters[0].kafka.maxBatchBytes: Invalid value: 100: spec.exporters[0].kafka.maxBatchBytes in body should be greater than or equal to 1024"},
		{"kafka batch flows", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: brokers, BatchFlows: 200000})
		}, "spec.exporters[0].kafka.batchFlows: Invalid value: 200000: spec.exporters[0].kafka.batchFlows in body should be less than or equal to 100000"},
		{"kafka sasl mechanism", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: brokers,
				SASL: &v1alpha1.KafkaSASL{Mechanism: "scram-sha-256", SecretRef: v1alpha1.SecretRef{Name: "kafka-user"}}})
		}, `spec.exporters[0].kafka.sasl.mechanism: Unsupported value: "scram-sha-256": supported values: "plain", "scram-sha-512"`},
		{"kafka sasl secret", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: brokers,
				SASL: &v1alpha1.KafkaSASL{Mechanism: v1alpha1.KafkaSASLPlain}})
		}, "spec.exporters[0].kafka.sasl.secretRef.name in body should be at least 1 chars long"},
		{"otlp without its settings", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterOTLP}}
		}, "spec.exporters[0]: Invalid value: otlp must be set for, and only for, type otlp"},
		{"otlp settings on stdout", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = []v1alpha1.Exporter{{Type: v1alpha1.ExporterStdout,
				OTLP: &v1alpha1.OTLPExporter{TargetHost: "otel", TargetPort: 4317}}}
		}, "spec.exporters[0]: Invalid value: otlp must be set for, and only for, type otlp"},
		{"otlp port", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = otlpExporter(&v1alpha1.OTLPExporter{TargetHost: "otel"})
		}, "spec.exporters[0].otlp.targetPort: Invalid value: 0: spec.exporters[0].otlp.targetPort in body should be greater than or equal to 1"},
		{"otlp protocol", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = otlpExporter(&v1alpha1.OTLPExporter{TargetHost: "otel", TargetPort: 4317, Protocol: "tcp"})
		}, `spec.exporters[0].otlp.protocol: Unsupported value: "tcp": supported values: "grpc", "http"`},
		{"otlp compression", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = otlpExporter(&v1alpha1.OTLPExporter{TargetHost: "otel", TargetPort: 4317, Compression: "zstd"})
		}, `spec.exporters[0].otlp.compression: Unsupported value: "zstd": supported values: "none", "gzip"`},
		{"otlp headers twice", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = otlpExporter(&v1alpha1.OTLPExporter{TargetHost: "otel", TargetPort: 4317,
				Headers: map[string]v1alpha1.OTLPHeaderValue{"x-tenant": "a"}, HeadersSecretRef: &v1alpha1.SecretRef{Name: "otel-auth"}})
		}, "spec.exporters[0].otlp: Invalid value: set headers or headersSecretRef, not both"},
		{"otlp header value with a comma", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = otlpExporter(&v1alpha1.OTLPExporter{TargetHost: "otel", TargetPort: 4317,
				Headers: map[string]v1alpha1.OTLPHeaderValue{"x-tenant": "a,b"}})
		}, "spec.exporters[0].otlp.headers: Invalid value: header values cannot contain a comma: --otlp-headers is a comma-separated key=value list"},
		{"otlp header name", func(fc *v1alpha1.FlowCollector) {
			fc.Spec.Exporters = otlpExporter(&v1alpha1.OTLPExporter{TargetHost: "otel", TargetPort: 4317,
				Headers: map[string]v1alpha1.OTLPHeaderValue{"x tenant": "a"}})
		}, "spec.exporters[0].otlp.headers: Invalid value: header names are 1 to 128 letters, digits, '.', '_' or '-'"},
		{"collector replicas", func(fc *v1alpha1.FlowCollector) { fc.Spec.Collector.Replicas = -1 },
			"spec.collector.replicas: Invalid value: -1: spec.collector.replicas in body should be greater than or equal to 1"},
		{"collector pull policy", func(fc *v1alpha1.FlowCollector) { fc.Spec.Collector.ImagePullPolicy = "Sometimes" },
			`spec.collector.imagePullPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fc := newCollector("fl-never")
			tc.change(fc)
			err := k8s.Create(ctx, fc, client.DryRunAll)
			if err == nil {
				t.Fatalf("accepted; want the schema to reject it with %q", tc.want)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want an Invalid error containing %q", err, tc.want)
			}
		})
	}
}

// TestExporterSchemaDefaults: every exporter type at once (five, the most
// the list takes) is accepted, and a kafka exporter with only brokers, an
// otlp exporter with only a target and no spec.collector get the defaults
// the render package assumes.
func TestExporterSchemaDefaults(t *testing.T) {
	needEnv(t)
	manifest := `apiVersion: flowlens.io/v1alpha1
kind: FlowCollector
metadata: {name: cluster}
spec:
  exporters:
  - {type: stdout}
  - {type: grpc, grpc: {targetHost: collector, targetPort: 9990}}
  - {type: ipfix, ipfix: {targetHost: ipfix, targetPort: 4739}}
  - {type: kafka, kafka: {brokers: ["kafka-0.kafka.svc:9092", "[fd00::1]:9092", "10.0.0.1:9093"], tls: {caSecretRef: {name: kafka-ca}}, sasl: {mechanism: plain, secretRef: {name: kafka-user}}}}
  - {type: otlp, otlp: {targetHost: otel, targetPort: 4317, headers: {x-tenant: net}}}
`
	fc := newCollector("")
	if err := k8s.Patch(context.Background(), fc, client.RawPatch("application/apply-patch+yaml", []byte(manifest)),
		client.FieldOwner("test"), client.DryRunAll); err != nil {
		t.Fatalf("five exporters: %v", err)
	}
	k, o, c := render.Kafka(&fc.Spec), render.OTLP(&fc.Spec), fc.Spec.Collector
	if k == nil || o == nil {
		t.Fatalf("exporters %+v", fc.Spec.Exporters)
	}
	if k.Topic != config.DefaultKafkaTopic || k.Compression != config.DefaultKafkaCompression || k.Linger == nil ||
		k.Linger.Duration != config.DefaultKafkaLinger || k.MaxBatchBytes != config.DefaultKafkaMaxBatchBytes ||
		k.Acks != config.DefaultKafkaAcks || k.Message != config.DefaultKafkaMessage || k.BatchFlows != config.DefaultKafkaBatchFlows ||
		k.TLS.CASecretRef.Key != render.DefaultCAKey {
		t.Errorf("kafka schema defaults %+v, want the render defaults", *k)
	}
	if o.Protocol != config.DefaultOTLPProtocol || o.BatchFlows != config.DefaultOTLPBatchFlows || o.Compression != "" {
		t.Errorf("otlp schema defaults %+v, want the render defaults", *o)
	}
	if c.Replicas != render.DefaultCollectorReplicas || c.ImagePullPolicy != corev1.PullIfNotPresent || c.Resources != nil || c.Image != "" {
		t.Errorf("collector schema defaults %+v", c)
	}

	// A sixth exporter is one too many (and necessarily a duplicate type).
	six := fc.DeepCopy()
	six.ResourceVersion = ""
	six.Spec.Exporters = append(six.Spec.Exporters, v1alpha1.Exporter{Type: v1alpha1.ExporterStdout})
	err := k8s.Create(context.Background(), six, client.DryRunAll)
	if want := "spec.exporters: Too many: 6: must have at most 5 items"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("six exporters: error %v, want %q", err, want)
	}
}

// collectorObjects are the Kafka collector's objects, by key, in ns.
func collectorObjects(ns string) []client.Object {
	return []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName, Namespace: ns}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName, Namespace: ns}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName, Namespace: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName, Namespace: ns}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName}},
	}
}

// TestKafkaCollector: a kafka exporter makes the operator run the collector
// Deployment with the exporter's settings and its ServiceAccount, RBAC,
// metrics Service and ConfigMap, all owned by the FlowCollector; spec.collector.replicas
// scales it; a Deployment deleted by hand comes back; removing the kafka
// exporter deletes every one of them and leaves the agents.
func TestKafkaCollector(t *testing.T) {
	needEnv(t)
	const ns = "fl-kafka"
	ctx := context.Background()
	fc := newCollector(ns)
	fc.Spec.Exporters = []v1alpha1.Exporter{
		{Type: v1alpha1.ExporterStdout},
		{Type: v1alpha1.ExporterKafka, Kafka: &v1alpha1.KafkaExporter{
			Brokers: []string{"kafka-0.kafka.svc:9092", "kafka-1.kafka.svc:9092"},
			SASL:    &v1alpha1.KafkaSASL{Mechanism: v1alpha1.KafkaSASLScram512, SecretRef: v1alpha1.SecretRef{Name: "kafka-user"}},
		}},
	}
	create(t, fc)
	fc = get(t)

	dep := waitFor(t, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName, Namespace: ns}}, exists)
	wantArgs := []string{
		"--kafka-brokers=kafka-0.kafka.svc:9092,kafka-1.kafka.svc:9092",
		"--kafka-topic=flowlens-flows",
		"--kafka-group=flowlens-collector",
		"--listen=", // Kafka only: no gRPC API
		"--auth=kubernetes",
		"--ui-listen=127.0.0.1:9402", // the service map, on the pod's loopback
		"--kafka-sasl-mechanism=scram-sha-512",
		"--kafka-sasl-password-file=/etc/flowlens/kafka/sasl/password",
		"--metrics-address=:9401",
		"--web-config-file=/etc/flowlens/web-config.yml", // the default metrics TLS
		"--output=none",
	}
	ctr := dep.Spec.Template.Spec.Containers[0]
	if *dep.Spec.Replicas != 1 || ctr.Image != testCollectorImage || !slices.Equal(ctr.Args, wantArgs) {
		t.Errorf("collector deployment: replicas %d image %s args %v; want 1, %s, %v", *dep.Spec.Replicas, ctr.Image, ctr.Args, testCollectorImage, wantArgs)
	}
	if len(ctr.Env) != 1 || ctr.Env[0].Name != "FLOWLENS_COLLECTOR_KAFKA_SASL_USERNAME" ||
		ctr.Env[0].ValueFrom.SecretKeyRef.Name != "kafka-user" || ctr.Env[0].ValueFrom.SecretKeyRef.Key != "username" {
		t.Errorf("collector env %+v", ctr.Env)
	}
	for _, obj := range collectorObjects(ns) {
		obj = waitFor(t, obj, exists)
		checkOwner(t, obj, fc)
		if obj.GetLabels()[render.LabelManagedBy] != render.ManagedByValue {
			t.Errorf("%T %s: labels %v", obj, obj.GetName(), obj.GetLabels())
		}
	}
	cm := waitFor(t, configMap(ns), exists)
	if !strings.Contains(cm.Data[render.ConfigKey], "kafka_brokers: kafka-0.kafka.svc:9092,kafka-1.kafka.svc:9092\n") {
		t.Errorf("agent configuration without the brokers:\n%s", cm.Data[render.ConfigKey])
	}
	waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected)

	// Scaled.
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Collector.Replicas = 3 }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, dep, func(d *appsv1.Deployment) error {
		if *d.Spec.Replicas != 3 {
			return fmt.Errorf("replicas %d, want 3", *d.Spec.Replicas)
		}
		return nil
	})

	// Deleted by hand: back, as the other objects the operator owns.
	if err := k8s.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName, Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: render.CollectorName, Namespace: ns}}, func(d *appsv1.Deployment) error {
		if !d.DeletionTimestamp.IsZero() || *d.Spec.Replicas != 3 {
			return fmt.Errorf("deployment not recreated yet (replicas %d, deleting %v)", *d.Spec.Replicas, d.DeletionTimestamp)
		}
		return nil
	})

	// The kafka exporter removed: every collector object goes, the agents
	// stay and lose their kafka keys.
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Exporters = fc.Spec.Exporters[:1] }); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, func() error {
		for _, obj := range collectorObjects(ns) {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (err %v)", obj, obj.GetName(), err)
			}
		}
		return nil
	})
	waitFor(t, configMap(ns), func(cm *corev1.ConfigMap) error {
		if strings.Contains(cm.Data[render.ConfigKey], "kafka") {
			return fmt.Errorf("agent configuration still has kafka keys:\n%s", cm.Data[render.ConfigKey])
		}
		return nil
	})
	waitFor(t, agentDaemonSet(ns), exists)
	waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected)
}

// TestKafkaBrokerDegraded: a broker the schema's shape check lets through
// but the operator's does not (a port out of range) sets Degraded, naming
// the broker, and no collector is started: CollectorReady says InvalidSpec.
func TestKafkaBrokerDegraded(t *testing.T) {
	needEnv(t)
	const ns = "fl-kafka-bad"
	fc := newCollector(ns)
	fc.Spec.Exporters = kafkaExporter(&v1alpha1.KafkaExporter{Brokers: []string{"kafka:9092", "kafka:99999"}})
	create(t, fc)
	got := waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonInvalidSpec)
	want := `spec.exporters[0].kafka.brokers[1] "kafka:99999": the port must be from 1 to 65535`
	for _, c := range got.Status.Conditions {
		if c.Type == v1alpha1.ConditionDegraded && !strings.Contains(c.Message, want) {
			t.Errorf("Degraded message %q, want it to contain %q", c.Message, want)
		}
	}
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: render.CollectorName}, &appsv1.Deployment{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("collector deployment of an invalid spec: err %v, want NotFound", err)
	}
	waitCondition(t, v1alpha1.ConditionCollectorReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
}

// TestKafkaSample: the Kafka sample in config/samples, which no
// kustomization applies, is valid and renders the collectors.
func TestKafkaSample(t *testing.T) {
	needEnv(t)
	objs := readYAML(t, "config/samples/flowlens_v1alpha1_flowcollector_kafka.yaml")
	if len(objs) != 1 || objs[0].GetKind() != "FlowCollector" {
		t.Fatalf("want one FlowCollector, got %d objects", len(objs))
	}
	u := objs[0]
	if err := k8s.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner("kubectl"), client.ForceOwnership, client.DryRunAll); err != nil {
		t.Fatalf("the API server refuses the sample: %v", err)
	}
	var fc v1alpha1.FlowCollector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &fc); err != nil {
		t.Fatal(err)
	}
	fc.Spec = render.WithDefaults(fc.Spec)
	if err := render.Validate(&fc.Spec); err != nil {
		t.Errorf("the operator refuses the sample: %v", err)
	}
	o, err := render.Build(&fc, render.Options{DefaultImage: testAgentImage, DefaultCollectorImage: testCollectorImage})
	if err != nil {
		t.Fatal(err)
	}
	if o.Collector == nil || *o.Collector.Deployment.Spec.Replicas != 3 {
		t.Errorf("the sample does not render 3 Kafka collectors: %+v", o.Collector)
	}
}

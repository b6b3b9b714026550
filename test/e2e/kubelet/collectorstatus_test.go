//go:build e2e_kubelet

package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/internal/shared/httpserve/httpservetest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
	"github.com/flowlens/flowlens/test/e2e/cluster"
)

// collectorMetricsSecret is the Secret of spec.collector.metricsTLS,
// created only once the operator has reported it missing.
const collectorMetricsSecret = "collector-metrics"

// checkCollectorMountFailed adds a kafka exporter (no broker runs: the
// collector is ready without one) with spec.collector.metricsTLS naming a
// Secret that does not exist, under the real kubelet:
//  1. the Kafka collector pod cannot mount it and the FlowCollector says so
//     (CollectorReady False, MountFailed, the pod and the kubelet's
//     message), while Ready, the agents', is True;
//  2. with the Secret, the collector starts, its HTTPS probes pass and
//     CollectorReady is True (CollectorsReady, 1 of 1);
//  3. metricsTLS removed: the default (the operator's Secret), the collector
//     ready again through its HTTPS probes, /metrics 403 without a client
//     certificate and the metrics to the scrape identity;
//  4. the exporter removed, CollectorReady goes.
func checkCollectorMountFailed(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	grpc := `{"type":"grpc","grpc":{"targetHost":"flowlens-collector.flowlens.svc","targetPort":9990}}`
	patchFlowCollector(ctx, t, c, fmt.Sprintf(`{"spec":{"exporters":[%s,{"type":"kafka","kafka":{"brokers":["kafka.flowlens.svc:9092"]}}],`+
		`"collector":{"metricsTLS":{"serverSecretRef":{"name":%q}}}}}`, grpc, collectorMetricsSecret))
	waitCondition(ctx, t, c, v1alpha1.ConditionCollectorReady, metav1.ConditionFalse, v1alpha1.ReasonMountFailed, fmt.Sprintf(
		"a collector cannot mount a volume (does the Secret exist in %s?): pod %s-", agentNamespace, render.CollectorName))
	waitCondition(ctx, t, c, v1alpha1.ConditionCollectorReady, metav1.ConditionFalse, v1alpha1.ReasonMountFailed,
		fmt.Sprintf(`secret %q not found`, collectorMetricsSecret))
	waitFlowCollector(ctx, t, c) // the agents roll too (kafka keys), and are Ready

	pki := receivertest.NewPKI(t)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: collectorMetricsSecret, Namespace: agentNamespace},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       readFile(t, pki.ServerCert),
			corev1.TLSPrivateKeyKey: readFile(t, pki.ServerKey),
		},
	}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	waitCondition(ctx, t, c, v1alpha1.ConditionCollectorReady, metav1.ConditionTrue, v1alpha1.ReasonCollectorsReady, "1 of 1 collectors are ready")
	fc := &v1alpha1.FlowCollector{}
	if err := c.Get(ctx, client.ObjectKey{Name: "cluster"}, fc); err != nil {
		t.Fatal(err)
	}
	if st := fc.Status; st.DesiredCollectors != 1 || st.ReadyCollectors != 1 || st.UpdatedCollectors != 1 {
		t.Errorf("collector counters %+v, want 1 desired, ready and updated", st)
	}

	patchFlowCollector(ctx, t, c, `{"spec":{"collector":{"metricsTLS":null}}}`)
	checkKafkaCollectorDefaultMetrics(ctx, t, c)

	patchFlowCollector(ctx, t, c, fmt.Sprintf(`{"spec":{"exporters":[%s]}}`, grpc))
	if fc := waitFlowCollector(ctx, t, c); meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionCollectorReady) != nil {
		t.Errorf("CollectorReady without a kafka exporter: %+v", fc.Status)
	}
	if err := c.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
}

// checkKafkaCollectorDefaultMetrics waits for the Kafka collector's pod of
// the default metrics TLS (the Secret flowlens-metrics-tls mounted) to be
// ready, and scrapes it at its pod's address: 403 without a client
// certificate, the collector's metrics with the scrape identity.
func checkKafkaCollectorDefaultMetrics(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	var pod *corev1.Pod
	cluster.WaitFor(ctx, t, "a ready Kafka collector pod with the default metrics TLS", 2*time.Minute, func() error {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(agentNamespace), client.MatchingLabels{render.LabelName: render.CollectorName}); err != nil {
			return err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			for _, v := range p.Spec.Volumes {
				if v.Secret != nil && v.Secret.SecretName == certs.MetricsTLSName && p.DeletionTimestamp == nil && podReady(p) {
					pod = p
					return nil
				}
			}
		}
		return fmt.Errorf("no ready pod with the Secret %s yet%s", certs.MetricsTLSName, podStates(ctx, c, agentNamespace))
	})
	if p := pod.Spec.Containers[0].ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("Kafka collector readiness probe %+v, want an HTTPS GET", p)
	}
	url := "https://" + net.JoinHostPort(pod.Status.PodIP, collectorMetricsPort) + "/metrics"
	if code, body, err := httpservetest.Get(anonymous(ctx, t, c, render.CollectorName), url); err != nil || code != http.StatusForbidden {
		t.Errorf("Kafka collector: /metrics without a client certificate: %d %v %q, want 403", code, err, body)
	}
	code, body, err := httpservetest.Get(scraper(ctx, t, c, render.CollectorName), url)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "flowlens_collector_") {
		t.Errorf("Kafka collector: /metrics with the scrape identity: %d %v\n%.500s", code, err, body)
	} else {
		t.Logf("Kafka collector %s: /metrics with the scrape identity: %d, %d bytes", pod.Name, code, len(body))
	}
}

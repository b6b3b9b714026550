//go:build e2e_kubelet

package kubelet

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
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
//  3. the exporter removed, CollectorReady goes.
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

	patchFlowCollector(ctx, t, c, fmt.Sprintf(`{"spec":{"exporters":[%s],"collector":{"metricsTLS":null}}}`, grpc))
	if fc := waitFlowCollector(ctx, t, c); meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionCollectorReady) != nil {
		t.Errorf("CollectorReady without a kafka exporter: %+v", fc.Status)
	}
	if err := c.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
}

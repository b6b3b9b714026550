//go:build e2e_kubelet

package kubelet

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// otlpHeadersSecret is the Secret of an otlp exporter's headersSecretRef,
// which the kubelet reads into the agent's environment; never given its key.
const otlpHeadersSecret = "otel-auth"

// checkConfigFailed adds an otlp exporter whose headersSecretRef names a
// Secret that does not exist, under the real kubelet:
//  1. the agent container cannot be created and the FlowCollector says so
//     (Ready False, ConfigFailed, the pod, the container and the kubelet's
//     message);
//  2. with the Secret but without its key, the kubelet's new message;
//  3. the exporter removed, the agent is ready again.
//
// It returns the agent pod then running.
func checkConfigFailed(ctx context.Context, t *testing.T, c client.Client) *corev1.Pod {
	t.Helper()
	grpc := `{"type":"grpc","grpc":{"targetHost":"flowlens-collector.flowlens.svc","targetPort":9990}}`
	patchFlowCollector(ctx, t, c, fmt.Sprintf(`{"spec":{"exporters":[%s,{"type":"otlp","otlp":{"targetHost":"otel.flowlens.svc","targetPort":4317,"headersSecretRef":{"name":%q}}}]}}`,
		grpc, otlpHeadersSecret))
	waitNotReady(ctx, t, c, v1alpha1.ReasonConfigFailed, fmt.Sprintf(
		"an agent container cannot start (does the Secret and its key exist in %s?): pod %s-", agentNamespace, render.AgentName))
	waitNotReady(ctx, t, c, v1alpha1.ReasonConfigFailed, fmt.Sprintf(`: container %s: secret %q not found`, render.AgentName, otlpHeadersSecret))

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: otlpHeadersSecret, Namespace: agentNamespace},
		Data:       map[string][]byte{"not-" + render.OTLPHeadersKey: []byte("x-tenant=a")},
	}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	waitNotReady(ctx, t, c, v1alpha1.ReasonConfigFailed, fmt.Sprintf(`: container %s: couldn't find key %s in Secret %s/%s`,
		render.AgentName, render.OTLPHeadersKey, agentNamespace, otlpHeadersSecret))

	patchFlowCollector(ctx, t, c, fmt.Sprintf(`{"spec":{"exporters":[%s]}}`, grpc))
	waitFlowCollector(ctx, t, c)
	if err := c.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	return agentPod(ctx, t, c)
}
